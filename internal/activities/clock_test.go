package activities_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// workerSkew is how far the skewed worker's clock is ahead of the others':
// more than the one-minute lease and the consistency window below.
const workerSkew = 2 * time.Minute

// Two workers share one PostgreSQL ledger, as a pool on two machines does;
// the second one's clock is two minutes ahead (issue 14, item 7). It must
// not take the first one's live lease, and when it reconciles the first
// one's pull request, whose answer was lost, its window must cover the real
// send: it keeps asking while the list lags, and finds the pull request.
func TestSkewedWorkerTakesNoLiveLeaseAndCutsNoWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewLedger(t)
	openLedger := func(now func() time.Time) ledger.Store {
		s, err := ledgerdsn.Open(ctx, dsn, ledgerdsn.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	first := openLedger(time.Now)
	ahead := func() time.Time { return time.Now().Add(workerSkew) }
	f := newReconcileFixture(t, halfway, func(d *activities.Deps) { d.Ledger = first })
	skewed, skewedEnv := skewedWorker(t, f, openLedger(ahead), ahead)
	args := func(s string) string {
		ref, err := first.PutItem(ctx, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}

	// The first worker holds a live one-minute lease on a comment it is
	// sending.
	claim, err := first.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: "op-busy", Kind: githubtools.NameComment, RequestHash: "h"},
		Owner: "first-worker#1", Lease: time.Minute, Running: true})
	if err != nil || claim.Status != ledger.Claimed {
		t.Fatalf("Claim: %q, %v", claim.Status, err)
	}
	requests := f.sb.GitHub.Stats().Requests
	_, err = skewedEnv.ExecuteActivity(skewed.Reconcile, contract.ReconcileInput{OperationID: "op-busy", Since: time.Now(),
		Arguments: args(`{"repo":"acme/app","number":1,"body":"hi"}`)})
	expectAppError(t, "Reconcile by the worker ahead under the first one's live lease", err, contract.ErrTypeOperationInProgress)
	if op, err := first.Get(ctx, "op-busy"); err != nil || op.Fence != claim.Op.Fence || op.LeaseOwner != "first-worker#1" {
		t.Fatalf("the worker ahead took the live lease: %+v, %v", op, err)
	}
	if n := f.sb.GitHub.Stats().Requests; n != requests {
		t.Errorf("the worker ahead asked GitHub %d times about an operation under another's live lease", n-requests)
	}

	// The first worker sends a pull request and loses the answer.
	for _, in := range []contract.ExecuteToolInput{
		{OperationID: "op-branch", Tool: githubtools.NameCreateBranch, Arguments: args(`{"repo":"acme/app","branch":"feat","from":"main"}`)},
		{OperationID: "op-file", Tool: githubtools.NamePutFile, Arguments: args(`{"repo":"acme/app","branch":"feat","path":"fix.md","content":"fixed\n","message":"fix"}`)},
	} {
		in.Tenant, in.TaskID, in.TurnID, in.ToolCallID = "d", "T", "T/t1", "call_"+in.OperationID
		if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in); err != nil {
			t.Fatal(err)
		}
	}
	const lag = 3 * time.Second
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultLag, Lag: lag},
	} {
		if err := f.sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	in := f.prInput(t)
	in.Arguments = args(prArgs)
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	expectAppError(t, "ExecuteTool with its answer dropped", err, contract.ErrTypeOperationUnknown)

	// The worker ahead reconciles it at once, through a one-minute window
	// that the workflow began just now: the list still leaves the pull
	// request out, so the first question does not see it.
	v, err := skewedEnv.ExecuteActivity(skewed.Reconcile, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID,
		ToolCallID: "call_pr", Since: time.Now(), Window: time.Minute, Arguments: in.Arguments})
	if err != nil {
		t.Fatalf("Reconcile by the worker ahead: %v", err)
	}
	var res contract.ReconcileResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Verdict != capstan.VerdictFound || res.ExternalID != f.prURL(t, 1) || res.Asked < 2 {
		t.Fatalf("Reconcile by the worker %v ahead = %+v; want the pull request found on a later question, the list lagging %v",
			workerSkew, res, lag)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want 1", n)
	}
}

// skewedWorker builds a second worker's activities over the same sandbox as
// f, with its own ledger handle and clock.
func skewedWorker(t *testing.T, f *reconcileFixture, led ledger.Store, now func() time.Time) (*activities.Activities, *testsuite.TestActivityEnvironment) {
	t.Helper()
	gh, err := githubtools.NewClient(f.sb.GitHubURL, "test-token", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sc := slack.New("xoxb-test", slack.OptionAPIURL(f.sb.SlackURL))
	registry := tool.NewRegistry(githubtools.Tools(gh)...)
	acts, err := activities.New(activities.Deps{
		Ledger:      led,
		Tools:       registry,
		Slack:       sc,
		Reconcilers: reconcilers.NewSet(registry, slackpost.NewMessages(sc)),
		Identity:    "skewed-worker",
		Now:         now,
		Random:      func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return acts, env
}
