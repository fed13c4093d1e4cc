package activities_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/postgres"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// outageFixture is the fixture over a PostgreSQL ledger reached through a
// link the test can cut (pgtest.Link), with breakers on, the ledger's
// tripping after two failures.
func outageFixture(t *testing.T) (*fixture, *postgres.Store, *pgtest.Link) {
	t.Helper()
	link, dsn := pgtest.NewLink(t, pgtest.NewLedger(t))
	store, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	set, err := breaker.NewSet(config.BreakerSettings{ConsecutiveFailures: 2, FailureRatio: 0.5, MinCalls: 10,
		Window: time.Minute, OpenFor: time.Second}, breaker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(d *activities.Deps) {
		d.Ledger, d.Breakers, d.LedgerOutageLimit = store, set, 7*time.Minute
	})
	return f, store, link
}

// ledgerWaitOf returns the BreakerWait of err, failing t unless err is the
// BreakerOpen error of breaker "ledger" the workflow waits out.
func ledgerWaitOf(t *testing.T, what string, err error) contract.BreakerWait {
	t.Helper()
	w, ok := contract.BreakerWaitOf(err)
	if !ok || w.Breaker != string(breaker.Ledger) || w.Wait <= 0 || w.OutageLimit != 7*time.Minute {
		t.Fatalf("%s with the ledger down: %v (wait %+v), want a BreakerOpen error of breaker ledger with a wait and the worker's outage limit", what, err, w)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		t.Errorf("%s: the BreakerOpen error is non-retryable; the workflow decides that", what)
	}
	return w
}

// TestToolCallWithTheLedgerDownIsNotSent: while the ledger cannot be
// reached, a tool call sends nothing and ends with the BreakerOpen error of
// breaker "ledger" — not a transient failure that spends the activity's
// attempts and then reads as an unknown outcome. Once the ledger is back,
// the same call is sent, once.
func TestToolCallWithTheLedgerDownIsNotSent(t *testing.T) {
	t.Parallel()
	f, store, link := outageFixture(t)
	args, err := store.PutItem(context.Background(), []byte(`{"repo":"acme/app","branch":"agent/x","from":"main"}`))
	if err != nil {
		t.Fatal(err)
	}
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_1",
		OperationID: "default:T1:github_create_branch:branch:create:acme/app:agent/x", Tool: githubtools.NameCreateBranch, Arguments: args}

	link.Down()
	for i := range 3 { // failures, then the open breaker: each the same error
		_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		w := ledgerWaitOf(t, "ExecuteTool", err)
		t.Logf("attempt %d: %s breaker, wait %s", i+1, w.State, w.Wait)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 0 {
		t.Fatalf("branches created with the ledger down = %d, want 0", n)
	}
	link.Up()
	if _, err := store.Get(context.Background(), in.OperationID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the operation's row after the outage: %v, want none: nothing was claimed, nothing sent", err)
	}
	// The breaker is open for 30 s: a new worker's activities (a fresh
	// breaker) are what runs after the outage here.
	g := newFixture(t, func(d *activities.Deps) { d.Ledger = store })
	var res contract.ExecuteToolResult
	v, err := g.env.ExecuteActivity(g.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("ExecuteTool with the ledger back: %v", err)
	}
	_ = v.Get(&res)
	if res.State != capstan.OutcomeSucceeded || f.sb.GitHub.Stats().BranchesCreated+g.sb.GitHub.Stats().BranchesCreated != 1 {
		t.Errorf("with the ledger back: %+v, branches %d; want succeeded, one branch", res, f.sb.GitHub.Stats().BranchesCreated+g.sb.GitHub.Stats().BranchesCreated)
	}
}

// TestModelTurnWithTheLedgerDownWaits: a model attempt that cannot read
// its turn from the ledger ends breaker_open on breaker "ledger", which the
// turn guard waits out without spending the turn's transport budget —
// never an unknown outcome that ends the task provider_unavailable.
func TestModelTurnWithTheLedgerDownWaits(t *testing.T) {
	t.Parallel()
	f, _, link := outageFixture(t)
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:hello",
		Seed: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	link.Down()
	_, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	r, ok := contract.AttemptReportOf(err)
	if !ok || r.Outcome != model.OutcomeBreakerOpen || r.Breaker != string(breaker.Ledger) || r.RetryAfterMS <= 0 ||
		r.OutageLimitMS != (7*time.Minute).Milliseconds() {
		t.Fatalf("ModelTurn with the ledger down: %v (report %+v), want breaker_open on breaker ledger with a wait", err, r)
	}
	if n := f.sb.Model.Stats().Requests; n != 0 {
		t.Errorf("model requests with the ledger down = %d, want 0", n)
	}
}

// TestModelAnswerTheLedgerCouldNotCommitCounts: the ledger goes down
// while the model answers, so the turn cannot commit; the attempt ends
// breaker_open on the ledger, and its report carries the usage the
// provider reported, which the task's budget counts.
func TestModelAnswerTheLedgerCouldNotCommitCounts(t *testing.T) {
	t.Parallel()
	f, _, link := outageFixture(t)
	f.sb.Model.SetFault(func(http.ResponseWriter, *http.Request, http.Handler) bool {
		link.Down() // then the sandbox answers as scripted
		return false
	})
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:hello",
		Seed: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	_, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	r, ok := contract.AttemptReportOf(err)
	if !ok || r.Outcome != model.OutcomeBreakerOpen || r.Breaker != string(breaker.Ledger) {
		t.Fatalf("ModelTurn whose commit the ledger refused: %v (report %+v), want breaker_open on breaker ledger", err, r)
	}
	if n := f.sb.Model.Stats().Requests; n != 1 {
		t.Errorf("model requests = %d, want 1", n)
	}
	if r.Usage.InputTokens <= 0 || r.Usage.OutputTokens <= 0 || r.UsageEstimated || r.Phase != model.PhaseStreamCompleted {
		t.Errorf("report = %+v, want the provider's usage of the completed stream", r)
	}
}

// TestOutcomeIsRecordedThroughALedgerOutage: the ledger goes down while a
// tool call is in flight (as GitHub creates the branch) and comes back two
// seconds later. The activity records what the call did once the ledger is
// back, within its own time: the call succeeds, sent once, and the ledger
// holds it succeeded — no reconciliation needed.
func TestOutcomeIsRecordedThroughALedgerOutage(t *testing.T) {
	t.Parallel()
	f, store, link := outageFixture(t)
	args, err := store.PutItem(context.Background(), []byte(`{"repo":"acme/app","branch":"agent/y","from":"main"}`))
	if err != nil {
		t.Fatal(err)
	}
	f.sb.GitHub.SetFault(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git/refs") {
			link.Down()
			time.AfterFunc(2*time.Second, link.Up)
		}
		return false // the branch is created, the ledger down
	})
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T2", TurnID: "T2/t1", ToolCallID: "call_1",
		OperationID: "default:T2:github_create_branch:branch:create:acme/app:agent/y", Tool: githubtools.NameCreateBranch, Arguments: args}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("ExecuteTool through a 2 s ledger outage: %v", err)
	}
	var res contract.ExecuteToolResult
	_ = v.Get(&res)
	op, err := store.Get(context.Background(), in.OperationID)
	if res.State != capstan.OutcomeSucceeded || err != nil || op.State != capstan.OutcomeSucceeded || f.sb.GitHub.Stats().BranchesCreated != 1 {
		t.Errorf("result %+v, ledger %s (%v), branches %d; want succeeded, recorded succeeded, one branch",
			res, op.State, err, f.sb.GitHub.Stats().BranchesCreated)
	}
}

// TestTruncateWithTheLedgerDownWaits: a truncation that cannot read the
// transcript ends with the BreakerOpen error of breaker "ledger", retried
// after the breaker's wait.
func TestTruncateWithTheLedgerDownWaits(t *testing.T) {
	t.Parallel()
	f, _, link := outageFixture(t)
	link.Down()
	_, err := f.env.ExecuteActivity(f.acts.TruncateTranscript, contract.TruncateInput{TaskID: "T", TurnID: "T/t3/k1",
		Transcript: ledger.ItemRef([]byte(`{"items":[]}`))})
	ledgerWaitOf(t, "TruncateTranscript", err)
}
