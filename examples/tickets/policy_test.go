package tickets_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/capstantest"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestTicketsCreateUnderTheTasksRules: what holds github_comment holds the
// team's own tool — a policy rule on its attributes, an approval, a
// budget, a breaker, the metrics — all configured as for a built-in tool
// and counted on the ticket service.
func TestTicketsCreateUnderTheTasksRules(t *testing.T) {
	dev := capstantest.StartDevServer(t, "")
	c := dev.Client(t)
	t.Run("group", func(t *testing.T) {
		t.Run("policy denies by attribute", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "SECURITY", nil)
			f.startWorker()
			res := wait(t, f.start(capstantest.TaskOptions{Rules: `rules:
  - name: no-security-tickets
    tool: tickets_create
    when: attributes["project"] == "SECURITY"
    effect: deny
    reason: security tickets are filed by people
`}))
			if len(res.Operations) != 1 || res.Operations[0].Outcome != capstan.OutcomeFailed || res.Operations[0].PolicyRule != "no-security-tickets" {
				t.Fatalf("operations %+v; want one tickets_create refused by no-security-tickets", res.Operations)
			}
			if n, posts := len(f.svc.Tickets()), f.faults.Requests(http.MethodPost, "/tickets"); n != 0 || posts != 0 {
				t.Errorf("%d tickets, %d POSTs; want none: a denied call sends nothing", n, posts)
			}
		})
		t.Run("approval", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.startWorker()
			task := f.start(capstantest.TaskOptions{RequireApproval: []string{"tickets_create"}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			op, err := task.WaitForOutcome(ctx, capstan.OutcomeAwaitingApproval)
			if err != nil {
				t.Fatal(err)
			}
			if posts := f.faults.Requests(http.MethodPost, "/tickets"); posts != 0 {
				t.Fatalf("%d POSTs while the call awaits approval; want 0", posts)
			}
			if !strings.Contains(op.Summary, "ticket in OPS") {
				t.Errorf("the person is shown %q; want the tool's own summary", op.Summary)
			}
			if err := task.Approve(ctx, op.ID); err != nil {
				t.Fatal(err)
			}
			f.record("approval required, then approved", wait(t, task), "yes: approve")
		})
		t.Run("budget", func(t *testing.T) {
			t.Parallel()
			// A model that would file a ticket in each of two turns, and a
			// budget the first turn spends: the budget is checked before
			// each model request, so the second turn is never asked for
			// and its ticket never filed.
			f := newFixtureOfTurns(t, c, "OPS", nil, 2)
			f.startWorker()
			res := wait(t, f.start(capstantest.TaskOptions{MaxTokens: 1}))
			if res.Status != capstantest.StatusFailed || res.FailureCode != "budget_exhausted" {
				t.Fatalf("task ended %s (%s): %s; want failed, budget_exhausted", res.Status, res.FailureCode, res.Message)
			}
			if n, posts := len(f.svc.Tickets()), f.faults.Requests(http.MethodPost, "/tickets"); n != 1 || posts != 1 {
				t.Errorf("%d tickets, %d POSTs; want the first turn's one: the second turn is past the budget", n, posts)
			}
			if res.Spend.Requests != 1 {
				t.Errorf("%d model requests spent; want 1", res.Spend.Requests)
			}
		})
		t.Run("breaker and metrics", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", map[string]string{"CAPSTAN_BREAKER_FAILURES": "2", "CAPSTAN_BREAKER_OPEN": "3s"})
			// 503 before acting, every time, until cleared: each send is
			// unknown, looked up (nothing there), and sent again.
			f.faults.FailBeforeActing(http.MethodPost, "/tickets", http.StatusServiceUnavailable, 0)
			w := f.startWorker()
			task := f.start(capstantest.TaskOptions{ReconcileWindow: time.Second})
			waitMetric(t, w.MetricsURL(), "capstan_breaker_state", map[string]string{"key": "tickets/write", "state": "open"}, 1)
			posts := f.faults.Requests(http.MethodPost, "/tickets")
			if posts != 2 {
				t.Errorf("%d POSTs when the breaker opened; want 2, its threshold", posts)
			}
			f.faults.Clear()
			f.record("503 on every create until cleared; breaker opens", wait(t, task), "no")
			if v := metric(t, w.MetricsURL(), "capstan_operations_total", map[string]string{"kind": "tickets_create", "state": "succeeded"}); v != 1 {
				t.Errorf("capstan_operations_total{kind=tickets_create,state=succeeded} = %v; want 1", v)
			}
		})
	})
}

// metric scrapes url and returns the value of the sample of name whose
// labels include labels; -1 when there is none.
func metric(t *testing.T, url, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	fam, ok := families[name]
	if !ok {
		return -1
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// waitMetric scrapes url every 100 ms until the sample is want, for at
// most a minute.
func waitMetric(t *testing.T, url, name string, labels map[string]string, want float64) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for metric(t, url, name, labels) != want {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s%v never became %v", name, labels, want)
		}
	}
}
