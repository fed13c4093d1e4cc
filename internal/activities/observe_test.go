package activities_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// observedFixture is the activities fixture with reconcilers, real metrics
// and a JSON log, as the worker wires them.
type observedFixture struct {
	*fixture
	acts    *activities.Activities
	env     *testsuite.TestActivityEnvironment
	metrics *metrics.Metrics
	log     *logLines
}

// logLines collects a worker's JSON log lines as its activities write them.
type logLines struct{ testenv.Buffer }

// lines are the JSON log lines whose msg is msg.
func (l *logLines) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func newObservedFixture(t *testing.T) *observedFixture {
	t.Helper()
	f := &observedFixture{fixture: newFixture(t), log: &logLines{}}
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	f.metrics = m
	gh, err := githubtools.NewClient(f.sb.GitHubURL, "test-token", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sc := slack.New("xoxb-test", slack.OptionAPIURL(f.sb.SlackURL))
	registry := tool.NewRegistry(githubtools.Tools(gh)...)
	f.acts, err = activities.New(activities.Deps{
		Ledger:      f.ledger,
		Tools:       registry,
		Slack:       sc,
		Reconcilers: reconcilers.NewSet(registry, slackpost.NewMessages(sc)),
		Identity:    "observed-worker",
		Now:         time.Now,
		Logger:      slog.New(slog.NewJSONHandler(f.log, nil)),
		Metrics:     m,
	})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	f.env = suite.NewTestActivityEnvironment()
	f.env.RegisterActivity(f.acts)
	return f
}

// value is the metric's value summed over the samples with labels.
func (f *observedFixture) value(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := f.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.Scrape{}
	for _, fam := range fams {
		s[fam.GetName()] = fam
	}
	v, _ := s.Value(name, labels)
	return v
}

func (f *observedFixture) want(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	if got := f.value(t, name, labels); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// Every state an operation reaches in the ledger is counted once, by kind,
// whether a tool call, a delivery or a reconciler wrote it; a replay, or a
// hand-back that leaves an operation UNKNOWN, counts nothing.
func TestOperationStatesAreCountedAsTheLedgerRecordsThem(t *testing.T) {
	t.Parallel()
	f := newObservedFixture(t)
	pr := githubtools.NameCreatePullRequest

	branch := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_b", OperationID: "op-branch",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","from":"main"}`)}
	for range 2 { // the second is a replay: nothing sent, nothing counted
		if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, branch); err != nil {
			t.Fatal(err)
		}
	}
	file := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_f", OperationID: "op-file",
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","path":"fix.md","content":"fixed\n","message":"fix"}`)}
	if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, file); err != nil {
		t.Fatal(err)
	}
	f.want(t, "capstan_operations_total", map[string]string{"kind": githubtools.NameCreateBranch, "state": "succeeded"}, 1)
	f.want(t, "capstan_operations_total", map[string]string{"kind": githubtools.NamePutFile, "state": "succeeded"}, 1)

	// GitHub opens the pull request but the answer is lost: UNKNOWN.
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}
	prIn := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t2", ToolCallID: "call_pr",
		OperationID: "d:T:github_create_pull_request:pr:create:acme/app:feat:main", Tool: pr, Arguments: f.args(t, prArgs)}
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, prIn)
	expectAppError(t, "ExecuteTool with the answer lost", err, contract.ErrTypeOperationUnknown)
	f.want(t, "capstan_operations_total", map[string]string{"kind": pr, "state": "unknown"}, 1)
	f.want(t, "capstan_retries_total", nil, 0) // only a reconciler decides: not a retry

	// A worker without reconcilers takes it and hands it back, still UNKNOWN.
	rin := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: prIn.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 5 * time.Second, Arguments: prIn.Arguments}
	bare, err := activities.New(activities.Deps{Ledger: f.ledger, Tools: f.acts.Tools, Identity: "bare-worker", Metrics: f.metrics})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	bareEnv := suite.NewTestActivityEnvironment()
	bareEnv.RegisterActivity(bare)
	_, err = bareEnv.ExecuteActivity(bare.Reconcile, rin)
	expectAppError(t, "Reconcile without reconcilers", err, contract.ErrTypeWorkerConfig)
	if op, _ := f.ledger.Get(context.Background(), prIn.OperationID); op.State != capstan.OutcomeUnknown {
		t.Fatalf("after the hand-back: %s, want UNKNOWN", op.State)
	}
	f.want(t, "capstan_operations_total", map[string]string{"kind": pr, "state": "unknown"}, 1)

	// The reconciler finds it.
	v, err := f.env.ExecuteActivity(f.acts.Reconcile, rin)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ReconcileResult
	if err := v.Get(&res); err != nil || res.Verdict != capstan.VerdictFound {
		t.Fatalf("Reconcile = %+v, %v; want found", res, err)
	}
	f.want(t, "capstan_operations_total", map[string]string{"kind": pr, "state": "succeeded"}, 1)
	f.want(t, "capstan_reconcile_verdicts_total", map[string]string{"kind": pr, "verdict": "found"}, 1)
	f.want(t, "capstan_reconcile_verdicts_total", nil, 1)
	f.want(t, "capstan_operations_total", nil, 4)

	// Each change was logged with the ids of its activity.
	settled := f.log.lines(t, "operation settled")
	if len(settled) != 4 {
		t.Fatalf("%d operation settled lines, want 4: %v", len(settled), settled)
	}
	want := []struct{ op, turn, state string }{
		{"op-branch", "T/t1", "succeeded"}, {"op-file", "T/t1", "succeeded"},
		{prIn.OperationID, "T/t2", "unknown"}, {prIn.OperationID, "", "succeeded"}, // Reconcile knows no turn
	}
	for i, w := range want {
		l := settled[i]
		if l["task_id"] != "T" || l["operation_id"] != w.op || l["state"] != w.state || (w.turn != "" && l["turn_id"] != w.turn) {
			t.Errorf("line %d = %v, want task T, operation %s, turn %q, state %s", i, l, w.op, w.turn, w.state)
		}
	}
	if rec := f.log.lines(t, "operation reconciled"); len(rec) != 1 || rec[0]["task_id"] != "T" || strings.Count(f.log.String(), `"operation_id"`) != strings.Count(f.log.String(), "\n") {
		t.Errorf("operation reconciled lines = %v; want one with task_id, and operation_id once on every line", rec)
	}
}

// Deliveries are counted by how each attempt ended, and a rate-limited one
// as a retry with its reason.
func TestDeliveriesAndRetriesAreCountedWithTheirReasons(t *testing.T) {
	t.Parallel()
	f := newObservedFixture(t)
	if err := f.sb.Slack.AddFault(sandbox.FaultRule{Endpoint: "chat.postMessage", Kind: sandbox.FaultRateLimit, Times: 1, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	in := contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "op-d", Channel: "#c", Text: "done"}
	_, err := f.env.ExecuteActivity(f.acts.Deliver, in)
	expectAppError(t, "rate-limited Deliver", err, contract.ErrTypeDeliveryNotSent)
	for range 2 { // the second finds it acked in the ledger
		if _, err := f.env.ExecuteActivity(f.acts.Deliver, in); err != nil {
			t.Fatal(err)
		}
	}
	f.want(t, "capstan_deliveries_total", map[string]string{"target": "slack", "state": "not_sent"}, 1)
	f.want(t, "capstan_deliveries_total", map[string]string{"target": "slack", "state": "succeeded"}, 1)
	f.want(t, "capstan_retries_total", map[string]string{"activity": "Deliver", "reason": "rate_limited"}, 1)
	f.want(t, "capstan_operations_total", map[string]string{"kind": slackpost.Kind, "state": "absent"}, 1)
	f.want(t, "capstan_operations_total", map[string]string{"kind": slackpost.Kind, "state": "succeeded"}, 1)

	// Slack refuses: the delivery is REFUSED, and not a retry.
	f.sb.Slack.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":false,"error":"channel_not_found"}`))
		return true
	})
	_, err = f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "op-gone", Channel: "#gone", Text: "done"})
	expectAppError(t, "refused Deliver", err, contract.ErrTypeDeliveryFailed)
	f.want(t, "capstan_deliveries_total", map[string]string{"target": "slack", "state": "failed"}, 1)
	f.want(t, "capstan_operations_total", map[string]string{"kind": slackpost.Kind, "state": "failed"}, 1)
	f.want(t, "capstan_retries_total", nil, 1)

	// Another worker holds a live claim: retried after its lease.
	args := `{"repo":"acme/app","branch":"held","from":"main"}`
	impl, _ := f.acts.Tools.Get(githubtools.NameCreateBranch)
	id, _ := impl.Identify(json.RawMessage(args))
	if _, err := f.ledger.Claim(context.Background(), ledger.ClaimRequest{Op: ledger.Operation{ID: "op-held", Kind: githubtools.NameCreateBranch,
		RequestHash: activities.RequestHash(githubtools.NameCreateBranch, id.Effect)}, Owner: "other-worker", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, contract.ExecuteToolInput{TaskID: "T", OperationID: "op-held", Tool: githubtools.NameCreateBranch, Arguments: f.args(t, args)})
	expectAppError(t, "ExecuteTool on a held claim", err, contract.ErrTypeOperationInProgress)
	f.want(t, "capstan_retries_total", map[string]string{"activity": "ExecuteTool", "reason": "operation_in_progress"}, 1)
	f.want(t, "capstan_operations_total", map[string]string{"kind": githubtools.NameCreateBranch}, 0)
}
