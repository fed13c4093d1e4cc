package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestLongPinnedTaskContinuesAsNewOnItsBuild: a pinned task that continues
// as new after another build became current. Its first run starts on
// build v1, pinned; build v2 (the same binary under another build id: the
// test is about routing, not code) is made current while it runs; the
// server suggests continue-as-new every 60 events, so the task continues
// after v2 is current. Every run of the chain is pinned to v1 — the
// server's rule in 1.29 is that a pinned run's continue-as-new inherits
// its version — and the task completes with no failed workflow task. This
// is what lets capstan say a task ends on the build it started on even
// across runs (docs/design.md §3.5); were the rule to change, a continued
// run would start fresh on the current build from its checkpoint, which is
// also safe (a new run replays nothing), and this test says which.
func TestLongPinnedTaskContinuesAsNewOnItsBuild(t *testing.T) {
	requireLong(t)
	flags, err := testenv.DevServerFlags()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testenv.StartDevServer(context.Background(), nil, append(flags, "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=60")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	sb := startSandbox(t)
	// Each turn's read is held, so the task outlives making v2 current.
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultDelay, Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	deployment := fmt.Sprintf("e2e-pinned-can-%d", time.Now().UnixNano())
	env := onServer(endpointEnv(t, deployment, sb), srv.FrontendHostPort())
	startWorker(t, asBuild(env, deployment, "v1"))
	setCurrentOn(t, c, deployment, "v1")

	const turns = 20
	id := fmt.Sprintf("e2e-pinned-can-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Read the README many times.", "--repo", branchRepo,
		"--model", fmt.Sprintf("openai:turns-%d", turns), "--id", id, "--max-turns", "24"); r.code != 0 {
		t.Fatalf("start: exit %d: %s", r.code, r.stderr)
	}
	startWorker(t, asBuild(env, deployment, "v2"))
	setCurrentOn(t, c, deployment, "v2")
	v2Current := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(id), "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != workflows.StatusCompleted || len(res.Turns) != turns {
		t.Fatalf("task ended %s with %d turns (%s: %s); want completed with %d", res.Status, len(res.Turns), res.FailureCode, res.Message, turns)
	}

	list, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(id))})
	if err != nil {
		t.Fatal(err)
	}
	runs := list.GetExecutions()
	sort.Slice(runs, func(i, j int) bool { return runs[i].GetStartTime().AsTime().Before(runs[j].GetStartTime().AsTime()) })
	continuedAfterV2 := false
	for i, e := range runs {
		rid := e.GetExecution().GetRunId()
		d, err := c.DescribeWorkflow(context.Background(), workflows.WorkflowID(id), rid)
		if err != nil {
			t.Fatal(err)
		}
		vi := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
		build, behavior := vi.GetDeploymentVersion().GetBuildId(), vi.GetBehavior()
		started := e.GetStartTime().AsTime()
		t.Logf("run %d (%s): started %s after v2 became current, build %q, %s, %s", i+1, rid,
			started.Sub(v2Current).Round(time.Millisecond), build, behavior, e.GetStatus())
		if i > 0 && started.After(v2Current) {
			continuedAfterV2 = true
		}
		if build != "v1" || behavior != enums.VERSIONING_BEHAVIOR_PINNED {
			t.Errorf("run %d of %d is on build %q (%s), want v1, pinned", i+1, len(runs), build, behavior)
		}
		for _, ev := range fetchRunHistory(t, c, workflows.WorkflowID(id), rid).GetEvents() {
			if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_FAILED {
				t.Errorf("run %d: workflow task failed at event %d: %s", i+1, ev.GetEventId(), ev.GetWorkflowTaskFailedEventAttributes().GetFailure().GetMessage())
			}
		}
	}
	if !continuedAfterV2 {
		t.Fatalf("no run of the task (%d runs) started after v2 became current: the test proves nothing", len(runs))
	}
}
