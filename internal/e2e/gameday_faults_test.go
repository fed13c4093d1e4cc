package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// periodicFaults makes the sandbox's GitHub and Slack drop or refuse every
// third or fourth write: per write endpoint it counts the requests and, on
// the 3rd, 7th, 10th, 14th, … (gaps of three and four by turns), adds a
// one-shot fault rule for that endpoint before the request reaches the
// rules, so the sandbox's own FaultDrop (act, then close the connection
// without an answer) or FaultFail 502 (refuse before acting) — the two by
// turns — strikes that request, or one racing it to the same endpoint.
// What fired is read back from the fakes' rules (Fired), not from this
// schedule.
type periodicFaults struct {
	mu      sync.Mutex
	seen    map[string]int // requests per endpoint
	next    map[string]int // the request number of its next fault
	gapFour map[string]bool
	fail    map[string]bool // the next fault is a 502 rather than a drop
	errs    []error
}

func newPeriodicFaults() *periodicFaults {
	return &periodicFaults{seen: map[string]int{}, next: map[string]int{}, gapFour: map[string]bool{}, fail: map[string]bool{}}
}

// githubWrite names the GitHub write endpoint a request goes to, "" for the
// rest (reads go through untouched: the reconcilers' look-ups answer).
func githubWrite(r *http.Request) string {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/git/refs"):
		return "git/create-ref"
	case r.Method == http.MethodPut && strings.Contains(p, "/contents/"):
		return "repos/create-or-update-file-contents"
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/pulls"):
		return "pulls/create"
	}
	return ""
}

func slackWrite(r *http.Request) string {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat.postMessage") {
		return "chat.postMessage"
	}
	return ""
}

// install puts the schedule in front of fake's rules.
func (p *periodicFaults) install(fake interface {
	SetFault(sandbox.Fault)
	AddFault(sandbox.FaultRule) error
}, endpointOf func(*http.Request) string) {
	fake.SetFault(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		ep := endpointOf(r)
		if ep == "" {
			return false
		}
		if rule, ok := p.due(ep); ok {
			if err := fake.AddFault(rule); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, err)
				p.mu.Unlock()
			}
		}
		return false // the rule, if one was added, applies next
	})
}

// due counts a request to ep and returns the rule for it when a fault is due.
func (p *periodicFaults) due(ep string) (sandbox.FaultRule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[ep]++
	if p.next[ep] == 0 {
		p.next[ep] = 3
	}
	if p.seen[ep] != p.next[ep] {
		return sandbox.FaultRule{}, false
	}
	gap := 3
	if p.gapFour[ep] {
		gap = 4
	}
	p.gapFour[ep] = !p.gapFour[ep]
	p.next[ep] += gap
	rule := sandbox.FaultRule{Endpoint: ep, Kind: sandbox.FaultDrop, Times: 1}
	if p.fail[ep] {
		rule = sandbox.FaultRule{Endpoint: ep, Kind: sandbox.FaultFail, Status: http.StatusBadGateway, Times: 1}
	}
	p.fail[ep] = !p.fail[ep]
	return rule, true
}

// summary counts the faults that fired, per endpoint and kind, from the
// fakes' rules, and the requests each write endpoint received.
func (p *periodicFaults) summary(rules ...[]sandbox.FaultState) (string, int) {
	fired := map[string]int{}
	total := 0
	for _, rs := range rules {
		for _, r := range rs {
			kind := string(r.Kind)
			if r.Kind == sandbox.FaultFail {
				kind = fmt.Sprintf("%d before acting", r.Status)
			} else if r.Kind == sandbox.FaultDrop {
				kind = "answer lost after acting"
			}
			fired[r.Endpoint+": "+kind] += r.Fired
			total += r.Fired
		}
	}
	keys := make([]string, 0, len(fired))
	for k := range fired {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s: %d", k, fired[k])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	eps := make([]string, 0, len(p.seen))
	for ep := range p.seen {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		fmt.Fprintf(&b, "\n  %s: %d requests", ep, p.seen[ep])
	}
	for _, err := range p.errs {
		fmt.Fprintf(&b, "\n  rule not added: %v", err)
	}
	return b.String(), total
}

// askedAnyone reads the workflow's history and returns the search
// attributes it ever set that mean a person was asked or an effect given
// up: a flag in CapstanFlags, or (a task before changeSearchFlags)
// CapstanNeedsHuman, CapstanAwaitingApproval, CapstanDeadLetter true.
func askedAnyone(t *testing.T, c client.Client, workflowID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var set []string
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Errorf("read history of %s: %v", workflowID, err)
			return set
		}
		attrs := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		var flags []string
		if p, ok := attrs[workflows.AttrFlags.GetName()]; ok && converter.GetDefaultDataConverter().FromPayload(p, &flags) == nil && len(flags) > 0 {
			set = append(set, fmt.Sprintf("CapstanFlags %v at event %d", flags, ev.GetEventId()))
		}
		for _, name := range []string{"CapstanNeedsHuman", "CapstanAwaitingApproval", "CapstanDeadLetter"} {
			p, ok := attrs[name]
			var v bool
			if ok && converter.GetDefaultDataConverter().FromPayload(p, &v) == nil && v {
				set = append(set, fmt.Sprintf("%s at event %d", name, ev.GetEventId()))
			}
		}
	}
	return set
}
