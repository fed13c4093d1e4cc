package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// rollingHeld is how many tasks of the first build are held mid-way.
const rollingHeld = 5

// TestLongRollingDeploy: build v1 (the worker as shipped) runs rollingHeld
// tasks, each held mid-way waiting for approval of its pull request. Build
// v2 — the worker built with -tags capstan_rolling_v2, whose workflow runs
// an activity v1 lacks before its first turn, a change deliberately not
// behind GetVersion — is started and made current. Approved, the held
// tasks finish on v1's worker with no nondeterminism error (a v1 history
// replayed on v2's code would have one); new tasks run on v2 and run its
// activity; v1 then drains (its drainage status says so) and its worker
// stops gracefully.
func TestLongRollingDeploy(t *testing.T) {
	requireLong(t)
	rollingDeploy(t, temporal, "")
}

// rollingDeploy is TestLongRollingDeploy on the server c talks to, at addr
// ("": the package's dev server).
func rollingDeploy(t *testing.T, c client.Client, addr string) {
	t.Helper()
	v2Bin, err := testenv.BuildWorker(t.TempDir(), "worker-v2", "capstan_rolling_v2")
	if err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	deployment := fmt.Sprintf("e2e-rolling-%d", time.Now().UnixNano())
	env := endpointEnv(t, deployment, sb)
	if addr != "" {
		env = onServer(env, addr)
	}
	v1 := startWorker(t, asBuild(env, deployment, "v1"))
	setCurrentOn(t, c, deployment, "v1")

	held := make([]string, rollingHeld)
	ops := make([]workflows.OperationRecord, rollingHeld)
	for i := range held {
		id, op := startApprovalTask(t, env, fmt.Sprintf("rolling-%d", i))
		held[i], ops[i] = id, op
		assertBuild(t, env, id, deployment+"/v1")
	}

	startWorkerBin(t, v2Bin, asBuild(env, deployment, "v2"))
	setCurrentOn(t, c, deployment, "v2")
	t.Logf("v2 current; starter versions:\n%s", runStarter(t, env, "versions").stdout)

	for i, id := range held {
		if r := runStarter(t, env, "approve", id, ops[i].OperationID, "--hash", ops[i].CallHash); r.code != 0 {
			t.Fatalf("approve %s: exit %d: %s", id, r.code, r.stderr)
		}
	}
	for _, id := range held {
		res := waitLongOn(t, c, id)
		if res.Status != workflows.StatusCompleted {
			t.Errorf("held task %s ended %s (%s): %s", id, res.Status, res.FailureCode, res.Message)
		}
		assertBuild(t, env, id, deployment+"/v1")
		if probes, wft := historyCountsOn(t, c, id); probes != 0 || wft != 0 {
			t.Errorf("held task %s: %d build probes (want 0: it ran v1's code) and %d failed workflow tasks (want 0: no nondeterminism): %q",
				id, probes, wft, workflowTaskFailures(t, c, id))
		}
	}

	for i := range 3 {
		id := startPlainTask(t, env, fmt.Sprintf("rolling-new-%d", i))
		if res := waitLongOn(t, c, id); res.Status != workflows.StatusCompleted {
			t.Errorf("new task %s ended %s (%s): %s", id, res.Status, res.FailureCode, res.Message)
		}
		assertBuild(t, env, id, deployment+"/v2")
		if probes, wft := historyCountsOn(t, c, id); probes != 1 || wft != 0 {
			t.Errorf("new task %s: %d build probes (want 1: it ran v2's code) and %d failed workflow tasks (want 0): %q",
				id, probes, wft, workflowTaskFailures(t, c, id))
		}
	}

	waitDrainedOn(t, c, deployment, "v1")
	if st := v1.stop(t, syscall.SIGTERM, time.Minute); !st.Success() {
		t.Errorf("v1's worker exited %v after draining, want 0:\n%s", st, v1.logs())
	}
	t.Logf("v1 drained and stopped; starter versions:\n%s", runStarter(t, env, "versions").stdout)
}

// asBuild is env for a worker of build in deployment (Worker Versioning).
func asBuild(env []string, deployment, build string) []string {
	return append(slices.Clone(env), "CAPSTAN_DEPLOYMENT_NAME="+deployment, "CAPSTAN_BUILD_ID="+build)
}

// setCurrent makes build current in deployment, once its worker's poll has
// registered the version (the server refuses a version it has not seen).
func setCurrent(t *testing.T, deployment, build string) {
	t.Helper()
	setCurrentOn(t, temporal, deployment, build)
}

// setCurrentOn is setCurrent on the server c talks to.
func setCurrentOn(t *testing.T, c client.Client, deployment, build string) {
	t.Helper()
	h := c.WorkerDeploymentClient().GetHandle(deployment)
	// The version appears with its first poll; there is no event to wait on.
	retryFor(t, fmt.Sprintf("make %s/%s current", deployment, build), 2*time.Minute, time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
		return err
	})
}

// retryFor calls try every interval until it returns nil, and fails the
// test with what and try's last error when within has passed: for server
// state that changes on its own clock, with no event to wait on.
func retryFor(t *testing.T, what string, within, every time.Duration, try func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(every)
	}
}

// assertBuild checks the build `starter status --json` reports for a task.
func assertBuild(t *testing.T, env []string, taskID, want string) {
	t.Helper()
	if build, pinned := taskBuild(t, env, taskID); build != want || !pinned {
		t.Errorf("starter status %s --json shows build %q, pinned %t; want %s, pinned", taskID, build, pinned, want)
	}
	if txt := runStarter(t, env, "status", taskID); !strings.Contains(txt.stdout, "build: "+want+" (pinned") {
		t.Errorf("starter status %s does not show its build %s:\n%s", taskID, want, txt.stdout)
	}
}

// waitLong waits for a task's result for as long as a loaded machine needs.
func waitLong(t *testing.T, taskID string) workflows.TaskResult {
	t.Helper()
	return waitLongOn(t, temporal, taskID)
}

// waitLongOn is waitLong on the server c talks to.
func waitLongOn(t *testing.T, c client.Client, taskID string) workflows.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(taskID), "").Get(ctx, &res); err != nil {
		t.Fatalf("task %s: %v", taskID, err)
	}
	return res
}

// historyCountsOn counts a task's scheduled build probes and its failed
// workflow tasks (a nondeterminism error fails a workflow task), on the
// server c talks to.
func historyCountsOn(t *testing.T, c client.Client, taskID string) (probes, failedWorkflowTasks int) {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), workflows.WorkflowID(taskID), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", taskID, err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "CapstanBuildProbe" {
			probes++
		}
		if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_FAILED {
			failedWorkflowTasks++
		}
	}
	return probes, failedWorkflowTasks
}

// workflowTaskFailures are the cause, identity and message of each failed
// workflow task in a task's history: what failed it.
func workflowTaskFailures(t *testing.T, c client.Client, taskID string) []string {
	t.Helper()
	var out []string
	it := c.GetWorkflowHistory(context.Background(), workflows.WorkflowID(taskID), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", taskID, err)
		}
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
			out = append(out, fmt.Sprintf("event %d: %s by %s: %s", ev.GetEventId(), a.GetCause(), a.GetIdentity(), a.GetFailure().GetMessage()))
		}
	}
	return out
}

// waitDrained waits until the server reports deployment/build drained: not
// current, and no open pinned task of it left.
func waitDrained(t *testing.T, deployment, build string) {
	t.Helper()
	waitDrainedOn(t, temporal, deployment, build)
}

// waitDrainedOn is waitDrained on the server c talks to.
func waitDrainedOn(t *testing.T, c client.Client, deployment, build string) {
	t.Helper()
	h := c.WorkerDeploymentClient().GetHandle(deployment)
	// Drainage is refreshed on the server's interval; there is no event to wait on.
	retryFor(t, fmt.Sprintf("%s/%s drained", deployment, build), 5*time.Minute, 2*time.Second, func() error {
		d, err := h.DescribeVersion(context.Background(), client.WorkerDeploymentDescribeVersionOptions{BuildID: build})
		switch {
		case err != nil:
			return err
		case d.Info.DrainageInfo == nil || d.Info.DrainageInfo.DrainageStatus != client.WorkerDeploymentVersionDrainageStatusDrained:
			return fmt.Errorf("drainage %+v", d.Info.DrainageInfo)
		}
		return nil
	})
}
