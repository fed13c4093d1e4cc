package activities_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/metrics"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// writeLog notes the ledger writes ExecuteTool makes: those that carry or
// are a policy decision counted, and the operation's writes in order.
type writeLog struct {
	activities.Ledger
	mu        sync.Mutex
	records   int      // RecordDecision calls
	withClaim int      // Claim calls that carried a decision
	claims    int      // every Claim call
	writes    []string // Claim, MarkRunning and Complete, as sequence shows them
}

// sequence returns the operation writes logged since it was last called.
func (l *writeLog) sequence() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.writes
	l.writes = nil
	return w
}

func (l *writeLog) MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error {
	l.mu.Lock()
	l.writes = append(l.writes, fmt.Sprintf("MarkRunning(facts=%v)", facts != nil))
	l.mu.Unlock()
	return l.Ledger.MarkRunning(ctx, id, fence, facts)
}

func (l *writeLog) Complete(ctx context.Context, c ledger.Completion) error {
	l.mu.Lock()
	l.writes = append(l.writes, "Complete("+string(c.State)+")")
	l.mu.Unlock()
	return l.Ledger.Complete(ctx, c)
}

func (l *writeLog) RecordDecision(ctx context.Context, d ledger.Decision) (ledger.Decision, bool, error) {
	l.mu.Lock()
	l.records++
	l.mu.Unlock()
	return l.Ledger.RecordDecision(ctx, d)
}

func (l *writeLog) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	l.mu.Lock()
	l.claims++
	if req.Decision != nil {
		l.withClaim++
	}
	l.writes = append(l.writes, fmt.Sprintf("Claim(running=%v, facts=%v)", req.Running, req.Facts != nil))
	l.mu.Unlock()
	return l.Ledger.Claim(ctx, req)
}

func (l *writeLog) counts() (records, withClaim, claims int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records, l.withClaim, l.claims
}

// A call the task's policy lets through has its decision recorded in the
// claim's own ledger write — no RecordDecision of its own — and the same
// row, counted once, as before. A repeated ExecuteTool of the operation
// whose policy would now refuse it gets the recorded decision (allow), as
// it did when the decision was written alone: the operation already
// succeeded, so it is replayed and nothing is sent again.
func TestAllowedCallRecordsItsDecisionWithTheClaim(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var log *writeLog
	f := newFixture(t, func(d *activities.Deps) {
		d.Metrics = m
		log = &writeLog{Ledger: d.Ledger}
		d.Ledger = log
	})
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default"}
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1", OperationID: "default:T:~s:t1:branch:0",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/x","from":"main"}`), Policy: tp}
	res := executeTool(t, f, in)
	if res.State != capstan.OutcomeSucceeded || res.Replayed || res.Decision == nil || res.Decision.Rule != "default/allow" || res.Decision.Refused {
		t.Fatalf("allowed call: %+v (decision %+v), want SUCCEEDED by default/allow", res, res.Decision)
	}
	if records, withClaim, claims := log.counts(); records != 0 || withClaim != 1 || claims != 1 {
		t.Errorf("RecordDecision %d, claims %d (%d with the decision); want 0, 1 (1)", records, claims, withClaim)
	}
	ds, err := f.ledger.Decisions(context.Background(), "T")
	if err != nil || len(ds) != 1 {
		t.Fatalf("decisions of T = %+v, %v; want one", ds, err)
	}
	if d := ds[0]; d.OperationID != in.OperationID || d.Tool != in.Tool || d.Tenant != "default" || d.Effect != "allow" || d.Rule != "default/allow" || d.Refused {
		t.Errorf("recorded decision %+v, want %s allowed by default/allow", d, in.OperationID)
	}

	in.Policy = &contract.TaskPolicy{Repositories: []string{"acme/other"}, Base: "main", Tenant: "default"} // would refuse acme/app
	again := executeTool(t, f, in)
	if again.State != capstan.OutcomeSucceeded || !again.Replayed || again.Decision == nil || again.Decision.Rule != "default/allow" {
		t.Errorf("repeated call: %+v (decision %+v), want the recorded allow, replayed", again, again.Decision)
	}
	if n := policyDecisions(t, m, "allow", "default/allow"); n != 1 {
		t.Errorf("capstan_policy_decisions_total{allow,default/allow} = %v, want 1", n)
	}
	if n := policyDecisions(t, m, "deny", "default/repository"); n != 0 {
		t.Errorf("capstan_policy_decisions_total{deny,default/repository} = %v, want 0: the first decision stands", n)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
}

// executeTool runs ExecuteTool and returns its result, failing the test on
// an error.
func executeTool(t *testing.T, f *fixture, in contract.ExecuteToolInput) contract.ExecuteToolResult {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ExecuteToolResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}
