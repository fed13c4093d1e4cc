package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/internal/workflows"
	"github.com/capstanhq/capstan/worker"
)

// beforeSearchFlags is a worker interceptor under which AgentTask takes
// the branch of a run that started before changeSearchFlags: GetVersion of
// "search-flags" answers DefaultVersion and records no marker, as a v15
// worker's run has none. The rest of the logic is this version's.
type beforeSearchFlags struct {
	interceptor.WorkerInterceptorBase
}

func (*beforeSearchFlags) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &beforeSearchFlagsIn{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type beforeSearchFlagsIn struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *beforeSearchFlagsIn) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&beforeSearchFlagsOut{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}})
}

type beforeSearchFlagsOut struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *beforeSearchFlagsOut) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	if changeID == "search-flags" {
		return workflow.DefaultVersion
	}
	return o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
}

// startInProcessWorker runs, in the test's process, a capstan worker on
// the server at addr polling env's queue (CAPSTAN_TASK_QUEUE), configured
// from env; with beforeFlags its tasks run the logic from before
// changeSearchFlags (beforeSearchFlags). It returns what stops it.
func startInProcessWorker(t *testing.T, addr string, env []string, beforeFlags bool) (stop func()) {
	t.Helper()
	lookup := func(key string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], key+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	queue, _ := lookup("CAPSTAN_TASK_QUEUE")
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := worker.NewRegistration(context.Background(), c, worker.Options{Namespace: "default", LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	var icpt []interceptor.WorkerInterceptor
	if beforeFlags {
		icpt = append(icpt, &beforeSearchFlags{})
	}
	w := sdkworker.New(c, queue, sdkworker.Options{Interceptors: append(icpt, reg.Interceptor())})
	if err := reg.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); reg.Close(); c.Close() }) }
	t.Cleanup(stop)
	return stop
}

// ownDevServer starts a dev server of the test's own, as the shared one is
// started, stopped at the end of the test.
func ownDevServer(t *testing.T) *testsuite.DevServer {
	t.Helper()
	flags, err := testenv.DevServerFlags()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testenv.StartDevServer(context.Background(), nil, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// addBools registers Bool search attributes names in namespace default
// of c.
func addBools(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attrs := map[string]enumspb.IndexedValueType{}
	for _, n := range names {
		attrs[n] = enumspb.INDEXED_VALUE_TYPE_BOOL
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: "default", SearchAttributes: attrs}); err != nil {
		t.Fatalf("register %v: %v", names, err)
	}
}

// customAttributes are the custom search attributes of namespace default.
func customAttributes(t *testing.T, c client.Client) map[string]enumspb.IndexedValueType {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	return list.GetCustomAttributes()
}

// startParked starts an AgentTask workflow named taskID on a task queue no
// worker polls, carrying attrs from its start: a task as visibility sees it,
// which stays running.
func startParked(t *testing.T, c client.Client, taskID string, attrs ...sdktemporal.SearchAttributeUpdate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := workflows.AgentTaskInput{TaskID: taskID, Tenant: "default", Prompt: "parked", Model: "openai:demo"}
	attrs = append(workflows.StartAttributes(in), attrs...)
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: workflows.WorkflowID(taskID), TaskQueue: "flags-parked-no-worker",
		TypedSearchAttributes: sdktemporal.NewSearchAttributes(attrs...),
	}, workflows.AgentTask, in); err != nil {
		t.Fatalf("start %s: %v", taskID, err)
	}
}

// waitListed polls `starter list ARGS` until its output names every task
// of want, and fails the test if it ever names one of not.
func waitListed(t *testing.T, env []string, want, not []string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ls := runStarter(t, env, append([]string{"list"}, args...)...)
		if ls.code != 0 {
			t.Fatalf("starter list %v: exit %d, stderr %s", args, ls.code, ls.stderr)
		}
		for _, id := range not {
			if strings.Contains(ls.stdout, id) {
				t.Fatalf("starter list %v lists %s, which it should not:\n%s", args, id, ls.stdout)
			}
		}
		all := true
		for _, id := range want {
			all = all && strings.Contains(ls.stdout, id)
		}
		if all {
			t.Logf("starter list %v:\n%s", args, ls.stdout)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("starter list %v never listed all of %v:\n%s", args, want, ls.stdout)
		}
		time.Sleep(500 * time.Millisecond) // visibility is eventually consistent
	}
}

// TestListFindsFlaggedTasksOldAndNew: on a namespace that ran capstan
// before changeSearchFlags — it has the Bools CapstanNeedsHuman,
// CapstanAwaitingApproval and CapstanDeadLetter — `starter list
// --needs-human` and `--awaiting-approval` find both tasks that run the
// logic from before (a worker pinned to it, beforeSearchFlags: they wait
// on the Bools) and tasks of this version (they wait on CapstanFlags), and
// no running task that waits for nothing; a worker of this version
// registers CapstanFlags there and no Bool.
func TestListFindsFlaggedTasksOldAndNew(t *testing.T) {
	t.Parallel()
	srv := ownDevServer(t)
	c := srv.Client()
	addBools(t, c, "CapstanNeedsHuman", "CapstanAwaitingApproval", "CapstanDeadLetter")

	sb := startSandbox(t)
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 2}, // one pull request of each logic
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail},             // the reconciler cannot ask: a person is
	} {
		if err := sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	env := onServer(append(endpointEnv(t, "e2e-flags-new-logic", sb), "CAPSTAN_RECONCILE_WINDOW=2s"), srv.FrontendHostPort())
	startWorker(t, env)
	attrs := customAttributes(t, c)
	if typ, ok := attrs[workflows.AttrFlags.GetName()]; !ok || typ != enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST {
		t.Fatalf("the worker did not register CapstanFlags as a KeywordList: %v", attrs)
	}
	oldEnv := onServer(append(endpointEnv(t, "e2e-flags-old-logic", sb), "CAPSTAN_RECONCILE_WINDOW=2s"), srv.FrontendHostPort())
	stopOld := startInProcessWorker(t, srv.FrontendHostPort(), oldEnv, true)

	stamp := time.Now().UnixNano()
	start := func(env []string, name string, args ...string) string {
		id := fmt.Sprintf("%s-%d", name, stamp)
		args = append([]string{"run", "--prompt", prPrompt, "--repo", branchRepo, "--model", "openai:demo", "--id", id}, args...)
		if r := runStarter(t, env, args...); r.code != 0 {
			t.Fatalf("start %s: exit %d, stderr %s", id, r.code, r.stderr)
		}
		return id
	}
	oldHuman, newHuman := start(oldEnv, "old-human"), start(env, "new-human")
	oldApproval := start(oldEnv, "old-approval", "--require-approval", "github_create_pull_request")
	newApproval := start(env, "new-approval", "--require-approval", "github_create_pull_request")
	waiting := fmt.Sprintf("waits-for-nothing-%d", stamp)
	startParked(t, c, waiting, workflows.AttrNeedsHuman.ValueSet(false))

	waitListed(t, env, []string{oldHuman, newHuman}, []string{oldApproval, newApproval, waiting}, "--needs-human")
	waitListed(t, env, []string{oldApproval, newApproval}, []string{oldHuman, newHuman, waiting}, "--awaiting-approval")
	for _, tc := range []struct {
		id        string
		wantFlags bool // else the Bools
	}{{oldHuman, false}, {oldApproval, false}, {newHuman, true}, {newApproval, true}} {
		set := askedAnyone(t, srv.Client(), workflows.WorkflowID(tc.id))
		if len(set) == 0 {
			t.Errorf("task %s never said it waits", tc.id)
		}
		for _, s := range set {
			if onFlags := strings.HasPrefix(s, "CapstanFlags "); onFlags != tc.wantFlags {
				t.Errorf("task %s said %s; want it on CapstanFlags: %v", tc.id, s, tc.wantFlags)
			}
		}
		t.Logf("%s: %v", tc.id, set)
	}

	// The pool upgrades: the old tasks' worker gives way to one of this
	// version, which replays them (no search-flags marker: the Bools) and
	// clears the Bool the old logic set once the approval comes.
	stopOld()
	startInProcessWorker(t, srv.FrontendHostPort(), oldEnv, false)
	var op workflows.OperationRecord
	for _, o := range decodeResult(t, runStarter(t, env, "status", oldApproval, "--json")).Operations {
		if o.State == capstan.OutcomeAwaitingApproval {
			op = o
		}
	}
	if r := runStarter(t, env, "approve", oldApproval, op.OperationID, "--hash", op.CallHash, "--as", "alice"); r.code != 0 {
		t.Fatalf("approve %s: exit %d, stderr %s", oldApproval, r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(oldApproval), "").Get(ctx, &res); err != nil || res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s after the upgrade: %+v, %v; want completed", oldApproval, res, err)
	}
	var cleared bool
	it := c.GetWorkflowHistory(ctx, workflows.WorkflowID(oldApproval), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		if _, ok := fields[workflows.AttrFlags.GetName()]; ok {
			t.Errorf("task %s set CapstanFlags after the upgrade (event %d); want it on its Bools to its end", oldApproval, ev.GetEventId())
		}
		var v bool
		if p, ok := fields[workflows.AttrAwaitingApproval.GetName()]; ok && converter.GetDefaultDataConverter().FromPayload(p, &v) == nil && !v {
			cleared = true
		}
	}
	if !cleared {
		t.Errorf("task %s never cleared CapstanAwaitingApproval after its approval", oldApproval)
	}
}

// TestCapstanRunsBesideThreeForeignBools: a namespace whose three Bool
// attributes (all SQL visibility allows it) are the user's own runs
// capstan: its worker registers every attribute capstan needs and no
// Bool, a task completes, and `starter list --needs-human` and
// `--awaiting-approval` work there (their filters name no Bool the
// namespace lacks). The dev server allows more than three Bools, so the
// test asserts capstan's part: it takes none.
func TestCapstanRunsBesideThreeForeignBools(t *testing.T) {
	t.Parallel()
	srv := ownDevServer(t)
	c := srv.Client()
	foreign := []string{"ShopIsUrgent", "ShopIsVIP", "ShopIsRefund"}
	addBools(t, c, foreign...)

	sb := startSandbox(t)
	env := onServer(endpointEnv(t, "e2e-flags-foreign-bools", sb), srv.FrontendHostPort())
	startWorker(t, env)
	var bools []string
	for name, typ := range customAttributes(t, c) {
		if typ == enumspb.INDEXED_VALUE_TYPE_BOOL {
			bools = append(bools, name)
		}
	}
	if len(bools) != len(foreign) {
		t.Fatalf("the namespace's Bool attributes are %v; want only the user's %v (capstan registers none)", bools, foreign)
	}
	if missing := workflows.MissingSearchAttributes(customAttributes(t, c)); len(missing) != 0 {
		t.Fatalf("the worker left capstan's attributes %v unregistered", missing)
	}
	// A second registration (another worker starting) finds nothing to do.
	if err := workerapp.EnsureSearchAttributes(context.Background(), c, "default", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	taskID := fmt.Sprintf("foreign-bools-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", prPrompt, "--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(taskID), "").Get(ctx, &res); err != nil || res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %+v, %v; want completed", taskID, res, err)
	}
	flagged := fmt.Sprintf("foreign-bools-flagged-%d", time.Now().UnixNano())
	startParked(t, c, flagged, workflows.AttrFlags.ValueSet([]string{string(workflows.FlagNeedsHuman)}))
	waitListed(t, env, []string{flagged}, []string{taskID}, "--needs-human")
	waitListed(t, env, nil, []string{taskID, flagged}, "--awaiting-approval")
}
