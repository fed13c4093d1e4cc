package reconcilers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/tool"
)

// The window and the verdict rules, over lookups scripted here: the set
// knows no tool, so any tool.Finder will do.

// clock is a fake clock that each question moves on by a second.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) tick() {
	c.mu.Lock()
	c.now = c.now.Add(time.Second)
	c.mu.Unlock()
}

// scripted is a lookup that answers from a script, one answer a question,
// the last one for ever; every question takes a second of the clock.
type scripted struct {
	clock   *clock
	answers []answer
	asked   int
}

type answer struct {
	obs tool.Observation
	err error
}

func (s *scripted) Key() string { return "the scripted effect" }

func (s *scripted) Find(context.Context) (tool.Observation, error) {
	a := s.answers[min(s.asked, len(s.answers)-1)]
	s.asked++
	s.clock.tick()
	return a.obs, a.err
}

// finder is a tool.Finder over one effect, as a tool or a delivery would be.
type finder struct {
	name   string
	effect tool.Effect
	err    error // Effect's error
}

func (f *finder) Name() string { return f.name }

func (f *finder) Effect(tool.Sent) (tool.Effect, error) { return f.effect, f.err }

// tool is a registered tool that is a finder: a tool needs nothing else to
// be reconciled.
type impl struct {
	tool.Tool
	*finder
}

func (t impl) Name() string { return t.finder.name }

// plainTool is a registered tool without a lookup (a read, say).
type plainTool struct{ tool.Tool }

func (plainTool) Name() string { return "read_thing" }

var (
	found    = answer{obs: tool.Observation{Outcome: tool.Found, ExternalID: "thing/1", Detail: "thing 1 carries the mark"}}
	notSeen  = answer{obs: tool.Observation{Outcome: tool.NotSeen, Detail: "no thing carries the mark"}}
	twoSeen  = answer{obs: tool.Observation{Outcome: tool.Ambiguous, Detail: "things 1 and 2 carry the mark"}}
	failing  = answer{err: errors.New("503 Service Unavailable")}
	sentCall = tool.Sent{Call: tool.Call{OperationID: "op-1", Arguments: json.RawMessage(`{}`)}}
)

// run reconciles an operation of kind "make_thing" whose lookup answers
// from the script, within a window of 3 s of the fake clock.
func run(t *testing.T, answers ...answer) (reconcilers.Answer, *scripted, []string, error) {
	t.Helper()
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &scripted{clock: c, answers: answers}
	set := reconcilers.NewSet(tool.NewRegistry(impl{finder: &finder{name: "make_thing", effect: s}}))
	var progress []string
	ans, err := set.Reconcile(context.Background(), reconcilers.Question{Kind: "make_thing", Sent: sentCall,
		Deadline: c.Now().Add(3 * time.Second), Window: 3 * time.Second},
		reconcilers.Pace{Now: c.Now, Backoff: func(int) time.Duration { return time.Millisecond },
			Asked: func(n int, last string) { progress = append(progress, last) }})
	return ans, s, progress, err
}

func TestReconcileVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		answers    []answer
		state      capstan.Outcome
		externalID string
		asked      int
		reason     string
	}{
		{"found at once", []answer{found}, capstan.OutcomeSucceeded, "thing/1", 1, "carries the mark"},
		{"ambiguous at once", []answer{twoSeen}, capstan.OutcomeNeedsHuman, "", 1, "things 1 and 2"},
		{"not yet, then found", []answer{notSeen, notSeen, found}, capstan.OutcomeSucceeded, "thing/1", 3, "carries the mark"},
		{"could not ask, then found", []answer{failing, found}, capstan.OutcomeSucceeded, "thing/1", 2, "carries the mark"},
		// Questions at 0, 1, 2 and 3 s: the one at the end of the window decides.
		{"not seen through the window", []answer{notSeen}, capstan.OutcomeAbsent, "", 4, "not seen through the 3s consistency window (4 questions)"},
		{"not seen, the last question failing", []answer{notSeen, notSeen, notSeen, failing}, capstan.OutcomeNeedsHuman, "", 4, "1 of 4 questions"},
		{"never asked through the window", []answer{failing}, capstan.OutcomeNeedsHuman, "", 4, "could not ask whether the operation took effect: 4 of 4"},
		{"failing, then not seen at the end", []answer{failing, failing, failing, notSeen}, capstan.OutcomeAbsent, "", 4, "not seen through"},
	} {
		ans, s, progress, err := run(t, tc.answers...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if ans.State != tc.state || ans.ExternalID != tc.externalID || ans.Asked != tc.asked || s.asked != tc.asked ||
			!strings.Contains(ans.Reason, tc.reason) || ans.Key != "the scripted effect" {
			t.Errorf("%s: %+v after %d questions; want %s %q after %d, a reason with %q and the effect's key",
				tc.name, ans, s.asked, tc.state, tc.externalID, tc.asked, tc.reason)
		}
		if len(progress) != tc.asked {
			t.Errorf("%s: progress %q, want one line a question", tc.name, progress)
		}
	}
}

// Without a lookup, or without one that can be formed, nobody can tell;
// without the client, the worker is misconfigured; neither asks anything.
func TestReconcileWithoutALookup(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Now()}
	s := &scripted{clock: c, answers: []answer{found}}
	set := reconcilers.NewSet(tool.NewRegistry(plainTool{}),
		&finder{name: "bad_args", effect: s, err: errors.New("the arguments do not parse")},
		&finder{name: "no_client", effect: s, err: tool.ErrNotConfigured})
	q := func(kind string) reconcilers.Question {
		return reconcilers.Question{Kind: kind, Sent: sentCall, Deadline: c.Now().Add(time.Minute), Window: time.Minute}
	}
	pace := reconcilers.Pace{Now: c.Now, Backoff: func(int) time.Duration { return time.Millisecond }}
	for kind, want := range map[string]error{"read_thing": reconcilers.ErrNoReconciler, "unheard_of": reconcilers.ErrNoReconciler,
		"bad_args": reconcilers.ErrBadTarget} {
		ans, err := set.Reconcile(context.Background(), q(kind), pace)
		if err != nil || ans.State != capstan.OutcomeNeedsHuman || ans.Asked != 1 || !strings.Contains(ans.Reason, want.Error()) {
			t.Errorf("%s: %+v, %v; want NEEDS_HUMAN saying %q", kind, ans, err, want)
		}
	}
	if ans, err := set.Reconcile(context.Background(), q("no_client"), pace); !errors.Is(err, tool.ErrNotConfigured) {
		t.Errorf("no_client: %+v, %v; want tool.ErrNotConfigured", ans, err)
	}
	if s.asked != 0 {
		t.Errorf("%d questions were asked, want none", s.asked)
	}
	noID := q("bad_args")
	noID.Sent.OperationID = ""
	set = reconcilers.NewSet(nil, &finder{name: "make_thing", effect: s})
	noID.Kind = "make_thing"
	if _, err := set.Effect(noID.Kind, noID.Sent); !errors.Is(err, reconcilers.ErrBadTarget) {
		t.Errorf("no operation id: %v, want ErrBadTarget", err)
	}
}

func TestReconcileEndsWithItsContext(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Now()}
	s := &scripted{clock: c, answers: []answer{notSeen}}
	set := reconcilers.NewSet(nil, &finder{name: "make_thing", effect: s})
	ctx, cancel := context.WithCancel(context.Background())
	ans, err := set.Reconcile(ctx, reconcilers.Question{Kind: "make_thing", Sent: sentCall,
		Deadline: c.Now().Add(time.Hour), Window: time.Hour},
		reconcilers.Pace{Now: c.Now, Backoff: func(int) time.Duration { return time.Hour },
			Asked: func(int, string) { cancel() }}) // cancelled while it waits to ask again
	if !errors.Is(err, context.Canceled) || ans.State != "" || s.asked != 1 {
		t.Errorf("%+v, %v after %d questions; want no verdict and context.Canceled after 1", ans, err, s.asked)
	}
}

func TestReconcileRefusesAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ans, _, _, err := run(t, answer{obs: tool.Observation{Outcome: "perhaps"}})
	if err == nil || ans.State != "" {
		t.Errorf("%+v, %v; want an error and no verdict", ans, err)
	}
}

func TestNewSetRefusesTwoLookupsForOneKind(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	reconcilers.NewSet(tool.NewRegistry(impl{finder: &finder{name: "make_thing"}}), &finder{name: "make_thing"})
}
