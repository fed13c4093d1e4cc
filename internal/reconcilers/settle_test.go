package reconcilers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/tool"
)

// settling is a scripted lookup whose service holds one effect per key: it
// can be sent again (tool.Settler), answering settle.
type settling struct {
	*scripted
	settle  answer
	settled int
}

func (s *settling) Settle(context.Context) (tool.Observation, error) {
	s.settled++
	s.clock.tick()
	return s.settle.obs, s.settle.err
}

func runSettling(t *testing.T, resend bool, settle answer, answers ...answer) (reconcilers.Answer, *settling) {
	t.Helper()
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &settling{scripted: &scripted{clock: c, answers: answers}, settle: settle}
	set := reconcilers.NewSet(tool.NewRegistry(impl{finder: &finder{name: "make_thing", effect: s}}))
	ans, err := set.Reconcile(context.Background(), reconcilers.Question{Kind: "make_thing", Sent: sentCall,
		Deadline: c.Now().Add(30 * time.Second), Window: 30 * time.Second, Resend: resend},
		reconcilers.Pace{Now: c.Now, Backoff: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	return ans, s
}

// After the first lookup saw nothing, a Settler is sent again once: what
// it settles is the answer at once, without the window; a re-send that
// settles nothing leaves the window's rules as they were; without Resend
// it is never sent.
func TestReconcileSettlesBySending(t *testing.T) {
	t.Parallel()
	made := answer{obs: tool.Observation{Outcome: tool.Found, ExternalID: "thing/2", Detail: "made again"}}
	other := answer{obs: tool.Observation{Outcome: tool.Ambiguous, Detail: "refused; another thing is there"}}
	for _, tc := range []struct {
		name     string
		resend   bool
		settle   answer
		answers  []answer
		state    capstan.Outcome
		id       string
		asked    int
		settled  int
		contains string
	}{
		{"found first: never sent", true, made, []answer{found}, capstan.OutcomeSucceeded, "thing/1", 1, 0, "carries the mark"},
		{"not seen, made again", true, made, []answer{notSeen}, capstan.OutcomeSucceeded, "thing/2", 2, 1, "made again"},
		{"not seen, refused by another", true, other, []answer{notSeen}, capstan.OutcomeNeedsHuman, "", 2, 1, "another thing"},
		{"re-send settles nothing, found later", true, answer{err: errors.New("502")}, []answer{notSeen, notSeen, found},
			capstan.OutcomeSucceeded, "thing/1", 4, 1, "carries the mark"},
		{"re-send settles nothing, absent at the end", true, answer{err: errors.New("502")}, []answer{notSeen},
			capstan.OutcomeAbsent, "", 0, 1, "not seen through"},
		{"no Resend: the window", false, made, []answer{notSeen}, capstan.OutcomeAbsent, "", 0, 0, "not seen through"},
	} {
		ans, s := runSettling(t, tc.resend, tc.settle, tc.answers...)
		if ans.State != tc.state || ans.ExternalID != tc.id || (tc.asked > 0 && ans.Asked != tc.asked) ||
			s.settled != tc.settled || !strings.Contains(ans.Reason, tc.contains) {
			t.Errorf("%s: %+v, sent again %d times; want %s %q after %d questions, %d re-sends, reason with %q",
				tc.name, ans, s.settled, tc.state, tc.id, tc.asked, tc.settled, tc.contains)
		}
	}
}

// A re-send goes through Pace.Resending (the dependency's breaker): refused,
// nothing is sent and the window decides; allowed, done hears how it went.
func TestReconcileResendsThroughItsGate(t *testing.T) {
	t.Parallel()
	made := answer{obs: tool.Observation{Outcome: tool.Found, ExternalID: "thing/2", Detail: "made again"}}
	for _, open := range []bool{true, false} {
		c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
		s := &settling{scripted: &scripted{clock: c, answers: []answer{notSeen}}, settle: made}
		set := reconcilers.NewSet(tool.NewRegistry(impl{finder: &finder{name: "make_thing", effect: s}}))
		judged := 0
		ans, err := set.Reconcile(context.Background(), reconcilers.Question{Kind: "make_thing", Sent: sentCall,
			Deadline: c.Now().Add(5 * time.Second), Window: 5 * time.Second, Resend: true},
			reconcilers.Pace{Now: c.Now, Backoff: func(int) time.Duration { return time.Millisecond },
				Resending: func() (func(error), bool) {
					return func(err error) {
						if err == nil {
							judged++
						}
					}, !open
				}})
		switch {
		case err != nil:
			t.Fatal(err)
		case open && (s.settled != 0 || ans.State != capstan.OutcomeAbsent):
			t.Errorf("breaker open: sent again %d times, %s; want nothing sent, absent by the window", s.settled, ans.State)
		case !open && (s.settled != 1 || judged != 1 || ans.State != capstan.OutcomeSucceeded):
			t.Errorf("breaker closed: sent again %d times, judged %d, %s; want once, judged, found", s.settled, judged, ans.State)
		}
	}
}
