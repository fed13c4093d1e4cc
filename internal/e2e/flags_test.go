package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/internal/workflows"
)

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

// addBools registers Bool search attributes names in ns of c, and waits
// until the namespace lists them.
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
// CapstanAwaitingApproval and CapstanDeadLetter, and tasks that set them —
// `starter list --needs-human` and `--awaiting-approval` find both the old
// tasks (their Bool set, as the old logic left it) and tasks of this
// version, which wait for a person or an approval on CapstanFlags, and
// nothing else; a worker of this version registers CapstanFlags there and
// no Bool.
func TestListFindsFlaggedTasksOldAndNew(t *testing.T) {
	t.Parallel()
	srv := ownDevServer(t)
	c := srv.Client()
	addBools(t, c, "CapstanNeedsHuman", "CapstanAwaitingApproval", "CapstanDeadLetter")

	sb := startSandbox(t)
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail}, // the reconciler cannot ask: a person is
	} {
		if err := sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	env := onServer(append(endpointEnv(t, "e2e-flags-old-new", sb), "CAPSTAN_RECONCILE_WINDOW=2s"), srv.FrontendHostPort())
	startWorker(t, env)
	attrs := customAttributes(t, c)
	if typ, ok := attrs[workflows.AttrFlags.GetName()]; !ok || typ != enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST {
		t.Fatalf("the worker did not register CapstanFlags as a KeywordList: %v", attrs)
	}

	stamp := time.Now().UnixNano()
	oldHuman, oldApproval, oldNeither := fmt.Sprintf("old-human-%d", stamp), fmt.Sprintf("old-approval-%d", stamp), fmt.Sprintf("old-neither-%d", stamp)
	startParked(t, c, oldHuman, workflows.AttrNeedsHuman.ValueSet(true), workflows.AttrAwaitingApproval.ValueSet(false))
	startParked(t, c, oldApproval, workflows.AttrNeedsHuman.ValueSet(false), workflows.AttrAwaitingApproval.ValueSet(true))
	startParked(t, c, oldNeither, workflows.AttrNeedsHuman.ValueSet(false))

	newHuman := fmt.Sprintf("new-human-%d", stamp)
	if r := runStarter(t, env, "run", "--prompt", prPrompt, "--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", newHuman); r.code != 0 {
		t.Fatalf("start %s: exit %d, stderr %s", newHuman, r.code, r.stderr)
	}
	newApproval := fmt.Sprintf("new-approval-%d", stamp)
	if r := runStarter(t, env, "run", "--prompt", prPrompt, "--repo", branchRepo, "--model", "openai:demo", "--id", newApproval,
		"--require-approval", "github_create_pull_request"); r.code != 0 {
		t.Fatalf("start %s: exit %d, stderr %s", newApproval, r.code, r.stderr)
	}

	waitListed(t, env, []string{oldHuman, newHuman}, []string{oldApproval, oldNeither, newApproval}, "--needs-human")
	waitListed(t, env, []string{oldApproval, newApproval}, []string{oldHuman, oldNeither, newHuman}, "--awaiting-approval")
	for _, id := range []string{newHuman, newApproval} {
		set := askedAnyone(t, c, workflows.WorkflowID(id))
		if len(set) == 0 {
			t.Errorf("task %s never set a flag", id)
		}
		for _, s := range set {
			if !strings.HasPrefix(s, "CapstanFlags ") {
				t.Errorf("task %s of this version set a Bool: %s", id, s)
			}
		}
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
