package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// These tests run a program's own tool through the public package on a
// real Temporal dev server (the pinned CLI: CAPSTAN_TEMPORAL_BIN or
// .bin/temporal), with the sandbox's scripted model asking for it: the
// script tickets-create calls tickets_create once, then answers.

// server is the package's dev server, started by the first test that
// needs one and stopped by TestMain.
var server struct {
	once sync.Once
	srv  *testsuite.DevServer
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.srv != nil {
		_ = server.srv.Stop()
	}
	os.Exit(code)
}

func devServer(t *testing.T) *testsuite.DevServer {
	t.Helper()
	server.once.Do(func() {
		flags, err := testenv.DevServerFlags()
		if err != nil {
			server.err = err
			return
		}
		server.srv, server.err = testenv.StartDevServer(context.Background(), nil, flags...)
	})
	if server.err != nil {
		t.Fatal(server.err)
	}
	return server.srv
}

// startSandbox starts the model, GitHub and Slack fakes for one test.
func startSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// sandboxEnv is the environment of a worker pointed at sb, with metrics on
// a port of its own, no live stream, and over on top.
func sandboxEnv(sb *sandbox.Sandbox, over map[string]string) func(string) (string, bool) {
	env := map[string]string{
		"OPENAI_BASE_URL": sb.ModelURL, "OPENAI_API_KEY": sandbox.Token,
		"GITHUB_API_URL": sb.GitHubURL, "GITHUB_TOKEN": sandbox.Token,
		"SLACK_API_URL": sb.SlackURL, "SLACK_BOT_TOKEN": sandbox.Token,
		"CAPSTAN_METRICS_ADDR": "127.0.0.1:0", "CAPSTAN_STREAM_ADDR": "",
	}
	for k, v := range over {
		env[k] = v
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func ledgerDSN(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
}

// startTask starts a task on queue whose model plays script, as `starter
// run --model openai:SCRIPT` would.
func startTask(t *testing.T, c client.Client, queue, id, script string) {
	t.Helper()
	startTaskWith(t, c, queue, id, script, nil)
}

// startTaskWith is startTask with the task's policy context (the starter's
// --require-approval, --label…); nil: the workflow derives the defaults'.
func startTaskWith(t *testing.T, c client.Client, queue, id, script string, tp *contract.TaskPolicy) {
	t.Helper()
	in := workflows.AgentTaskInput{Policy: tp, TaskID: id, Tenant: config.DefaultTenant, Logic: workflows.CurrentLogic,
		Prompt: "The disk is full: file a ticket.", Model: "openai:" + script, MaxTurns: 5,
		HumanTimeout: config.DefaultHumanTimeout, ReconcileWindow: config.DefaultReconcileWindow,
		DependencyOutageLimit: config.DefaultDependencyOutageLimit, ApprovalTimeout: config.DefaultApprovalTimeout}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WorkflowID(id), TaskQueue: queue,
		TypedSearchAttributes: sdktemporal.NewSearchAttributes(workflows.StartAttributes(in)...)}, workflows.AgentTask, in)
	if err != nil {
		t.Fatalf("start task %s: %v", id, err)
	}
}

func waitResult(t *testing.T, c client.Client, id string) workflows.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(id), "").Get(ctx, &res); err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	return res
}

// oneTicket checks that the task completed with one tickets_create
// operation in state want, and that the tool ran for it as often as ran
// (0 or 1), with the operation's id.
func oneTicket(t *testing.T, res workflows.TaskResult, tickets *ticketTool, want capstan.Outcome, ran int) workflows.OperationRecord {
	t.Helper()
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", res.TaskID, res.Status, res.FailureCode, res.Message)
	}
	if len(res.Operations) != 1 || res.Operations[0].Tool != "tickets_create" || res.Operations[0].State != want {
		t.Fatalf("operations %+v; want one tickets_create, %s", res.Operations, want)
	}
	op := res.Operations[0]
	calls := tickets.Calls()
	if len(calls) != ran {
		t.Fatalf("the tool ran %d times (%+v); want %d", len(calls), calls, ran)
	}
	if ran == 1 && (calls[0].OperationID != op.OperationID || calls[0].Title != "disk full ("+res.TaskID+")") {
		t.Errorf("the tool ran with %+v; want operation %s and the script's title", calls[0], op.OperationID)
	}
	return op
}

// TestNewRunsAProgramsToolOnce: a tool given in Options.Tools, on a worker
// from New that dials Temporal from the process's environment, is offered
// to the model, runs once with the operation id capstan gave the call, and
// is counted in the worker's metrics under its name; its breaker
// (tickets/write, from its name) shows closed from the start. RegisterTool
// refuses a name a built-in or another tool has, and any tool once the
// worker started.
func TestNewRunsAProgramsToolOnce(t *testing.T) {
	srv := devServer(t)
	sb := startSandbox(t)
	t.Setenv("TEMPORAL_ADDRESS", srv.FrontendHostPort())
	t.Setenv("TEMPORAL_NAMESPACE", "default")
	const queue = "worker-new"
	tickets := newTicketTool("tickets_create")
	ctx := context.Background()
	w, err := worker.New(ctx, worker.Options{TaskQueue: queue, LedgerDSN: ledgerDSN(t), Tools: []tool.Tool{tickets},
		LookupEnv: sandboxEnv(sb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.TaskQueue() != queue || w.Identity() == "" || w.MetricsURL() == "" {
		t.Errorf("queue %q, identity %q, metrics %q; want %q, a name and a URL", w.TaskQueue(), w.Identity(), w.MetricsURL(), queue)
	}
	for _, name := range []string{"tickets_create", "github_comment"} {
		if err := w.RegisterTool(newTicketTool(name)); !errors.Is(err, worker.ErrDuplicateTool) {
			t.Errorf("RegisterTool(%s) = %v; want ErrDuplicateTool", name, err)
		} else {
			t.Logf("RegisterTool(%s): %v", name, err)
		}
	}
	if err := w.RegisterTool(newTicketTool("mcp__x__y")); !errors.Is(err, worker.ErrInvalidTool) {
		t.Errorf("RegisterTool(mcp__x__y) = %v; want ErrInvalidTool", err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.RegisterTool(newTicketTool("tickets_close")); !errors.Is(err, worker.ErrAlreadyRegistered) {
		t.Errorf("RegisterTool after Start = %v; want ErrAlreadyRegistered", err)
	}
	if v, ok := testenv.ScrapeMetrics(t, w.MetricsURL()).Value("capstan_breaker_state", map[string]string{"key": "tickets/write", "state": "closed"}); !ok || v != 1 {
		t.Errorf("capstan_breaker_state{key=tickets/write,state=closed} = %v (present %v) at start; want 1", v, ok)
	}

	startTask(t, srv.Client(), queue, "worker-new-1", "tickets-create")
	op := oneTicket(t, waitResult(t, srv.Client(), "worker-new-1"), tickets, capstan.OutcomeSucceeded, 1)
	if op.ExternalID != "T-1" {
		t.Errorf("external id %q; want T-1, the tool's", op.ExternalID)
	}
	if v, _ := testenv.ScrapeMetrics(t, w.MetricsURL()).Value("capstan_operations_total", map[string]string{"kind": "tickets_create", "state": "succeeded"}); v != 1 {
		t.Errorf("capstan_operations_total{kind=tickets_create,state=succeeded} = %v; want 1", v)
	}
}

// TestRegistrationOnProgramsWorker: capstan's workflow and activities
// registered on a Temporal worker the program made itself, on its own
// client and with its own interceptor beside capstan's, run a task that
// calls the program's tool once; the program's interceptor saw capstan's
// activities.
func TestRegistrationOnProgramsWorker(t *testing.T) {
	srv := devServer(t)
	sb := startSandbox(t)
	const queue = "worker-registration"
	c := srv.Client()
	tickets := newTicketTool("tickets_create")
	reg, err := worker.NewRegistration(context.Background(), c, worker.Options{LedgerDSN: ledgerDSN(t), Tools: []tool.Tool{tickets},
		LookupEnv: sandboxEnv(sb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	seen := &countingInterceptor{}
	w := sdkworker.New(c, queue, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{seen, reg.Interceptor()}})
	if err := reg.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(w); !errors.Is(err, worker.ErrAlreadyRegistered) {
		t.Errorf("a second Register = %v; want ErrAlreadyRegistered", err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	startTask(t, c, queue, "worker-registration-1", "tickets-create")
	oneTicket(t, waitResult(t, c, "worker-registration-1"), tickets, capstan.OutcomeSucceeded, 1)
	if seen.activities() == 0 {
		t.Error("the program's own interceptor saw no activity")
	}
}

// TestProgramsToolUnderPolicy: the worker's policy file (Options.PolicyFile)
// decides a program's tool by its name and class as it does a built-in
// one: its rule refuses the call before anything is sent, the tool never
// runs, and the operation carries the rule's name.
func TestProgramsToolUnderPolicy(t *testing.T) {
	srv := devServer(t)
	sb := startSandbox(t)
	const queue = "worker-policy"
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(`rules:
  - name: no-unsafe-tickets
    tool: tickets_create
    when: class == "unsafe"
    effect: deny
    reason: tickets are filed by people this week
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tickets := newTicketTool("tickets_create")
	w, err := worker.New(context.Background(), worker.Options{Client: srv.Client(), TaskQueue: queue, LedgerDSN: ledgerDSN(t),
		PolicyFile: policyFile, Tools: []tool.Tool{tickets}, LookupEnv: sandboxEnv(sb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	startTask(t, srv.Client(), queue, "worker-policy-1", "tickets-create")
	op := oneTicket(t, waitResult(t, srv.Client(), "worker-policy-1"), tickets, capstan.OutcomeFailed, 0)
	if op.PolicyRule != "no-unsafe-tickets" {
		t.Errorf("operation refused by rule %q (%s); want no-unsafe-tickets", op.PolicyRule, op.Reason)
	}
}

// countingInterceptor is a program's own worker interceptor: it counts the
// activities it sees.
type countingInterceptor struct {
	interceptor.WorkerInterceptorBase
	mu sync.Mutex
	n  int
}

func (c *countingInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return next
}

func (c *countingInterceptor) activities() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestProgramsToolTripsItsBreaker: a program's tool whose service is down
// trips its own breaker (tickets/write, from its name) after
// CAPSTAN_BREAKER_FAILURES failed calls, as a built-in tool trips
// github/write: the metrics show it open, the task says it waits for it,
// and no further call is sent while it is open.
func TestProgramsToolTripsItsBreaker(t *testing.T) {
	srv := devServer(t)
	sb := startSandbox(t)
	const queue, id = "worker-breaker", "worker-breaker-1"
	tickets := newTicketTool("tickets_create")
	tickets.fail = tool.WithVerdict(errors.New("the tickets service answered 503"), tool.VerdictNotSent)
	w, err := worker.New(context.Background(), worker.Options{Client: srv.Client(), TaskQueue: queue, LedgerDSN: ledgerDSN(t),
		Tools: []tool.Tool{tickets}, LookupEnv: sandboxEnv(sb, map[string]string{"CAPSTAN_BREAKER_FAILURES": "2", "CAPSTAN_BREAKER_OPEN": "10m"})})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	startTask(t, srv.Client(), queue, id, "tickets-create")
	defer func() {
		_ = srv.Client().TerminateWorkflow(context.Background(), workflows.WorkflowID(id), "", "test over")
	}()

	open := map[string]string{"key": "tickets/write", "state": "open"}
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, _ := testenv.ScrapeMetrics(t, w.MetricsURL()).Value("capstan_breaker_state", open); v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker tickets/write not open after a minute; the tool ran %d times", len(tickets.Calls()))
		}
		<-tick.C
	}
	var res workflows.TaskResult
	for res.Waiting == "" && time.Now().Before(deadline) {
		q, err := srv.Client().QueryWorkflow(context.Background(), workflows.WorkflowID(id), "", workflows.QueryStatus)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Get(&res); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
	if !strings.Contains(res.Waiting, "breaker tickets/write") {
		t.Errorf("task waiting %q; want it waiting for breaker tickets/write", res.Waiting)
	}
	if n := len(tickets.Calls()); n != 2 {
		t.Errorf("the tool was called %d times; want 2, the breaker's threshold, and none while it is open", n)
	}
}

// TestProgramsToolWaitsForApproval: a task that requires a person's
// approval for the program's tool by its name (--require-approval
// tickets_create) holds the call, sending nothing, until a person
// approves it; then the tool runs once.
func TestProgramsToolWaitsForApproval(t *testing.T) {
	srv := devServer(t)
	sb := startSandbox(t)
	const queue, id = "worker-approval", "worker-approval-1"
	c := srv.Client()
	tickets := newTicketTool("tickets_create")
	w, err := worker.New(context.Background(), worker.Options{Client: c, TaskQueue: queue, LedgerDSN: ledgerDSN(t),
		Tools: []tool.Tool{tickets}, LookupEnv: sandboxEnv(sb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	startTaskWith(t, c, queue, id, "tickets-create", &contract.TaskPolicy{Tenant: config.DefaultTenant,
		MaxRefusals: config.DefaultPolicyRefusals, RequireApproval: []string{"tickets_create"}})

	var res workflows.TaskResult
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for len(res.Operations) == 0 || res.Operations[0].State != capstan.OutcomeAwaitingApproval {
		if time.Now().After(deadline) {
			t.Fatalf("no operation awaiting approval after a minute: %+v", res.Operations)
		}
		<-tick.C
		q, err := c.QueryWorkflow(context.Background(), workflows.WorkflowID(id), "", workflows.QueryStatus)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Get(&res); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tickets.Calls()); n != 0 {
		t.Fatalf("the tool ran %d times before anyone approved", n)
	}
	op := res.Operations[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: workflows.WorkflowID(id), UpdateName: workflows.UpdateApprove,
		WaitForStage: client.WorkflowUpdateStageCompleted,
		Args:         []any{workflows.ApprovalRequest{OperationID: op.OperationID, By: "ada", Hash: op.CallHash}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Get(ctx, nil); err != nil {
		t.Fatalf("approve: %v", err)
	}
	done := oneTicket(t, waitResult(t, c, id), tickets, capstan.OutcomeSucceeded, 1)
	if done.Approval == nil || done.Approval.By != "ada" {
		t.Errorf("approval %+v; want ada's", done.Approval)
	}
}
