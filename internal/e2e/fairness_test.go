package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The fairness run's shape: tenant A's burst, tenant B's few, the worker's
// activity slots, the sandbox script each task runs (a model turn, one
// GitHub read, an answer) and how long the sandbox GitHub holds that read
// (so the two slots, not the machine, are the bottleneck).
const (
	fairnessBurst     = 200
	fairnessFew       = 5
	fairnessSlots     = 2
	fairnessModel     = "openai:turns-2"
	fairnessReadDelay = time.Second
)

// TestLongFairness: on a worker with two activity slots, tenant A starts
// fairnessBurst short tasks, then tenant B starts fairnessFew with
// `starter run --tenant B`. With fairness keys (the server runs with
// matching.enableFairness, in one partition per queue:
// testenv.DevServerFlags), B's tasks complete while most of A's still
// wait, within 3× the latency B's tasks have on an idle pool. The same
// burst without fairness keys is measured beside it and logged.
func TestLongFairness(t *testing.T) {
	requireLong(t)
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultDelay, Delay: fairnessReadDelay}); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("e2e-fair-%d", time.Now().UnixNano())
	env := append(endpointEnv(t, queue, sb), fmt.Sprintf("CAPSTAN_ACTIVITY_SLOTS=%d", fairnessSlots))
	startWorker(t, env)

	idle := fairnessRound(t, temporal, sb, env, queue, "idle", 0, true)
	fair := fairnessRound(t, temporal, sb, env, queue, "fair", fairnessBurst, true)
	unfair := fairnessRound(t, temporal, sb, env, queue, "unfair", fairnessBurst, false)
	for _, r := range []roundFigures{idle, fair, unfair} {
		t.Logf("%-6s B's %d: max latency %s (each %v); A's %d: %d still open when B's last completed, all done %s after the burst began",
			r.name, fairnessFew, r.bMax.Round(time.Millisecond), r.bEach, r.burst, r.aOpenAtB, r.aAll.Round(time.Second))
	}
	if fair.bMax > 3*idle.bMax {
		t.Errorf("with fairness keys B's max latency %s exceeds 3× its idle latency %s", fair.bMax, idle.bMax)
	}
	if fair.aOpenAtB*2 < fairnessBurst {
		t.Errorf("with fairness keys only %d of A's %d tasks were still open when B's last completed; want most", fair.aOpenAtB, fairnessBurst)
	}
}

type roundFigures struct {
	name     string
	burst    int
	bMax     time.Duration   // the longest of B's start-to-close times
	bEach    []time.Duration // B's, sorted
	aOpenAtB int             // A's tasks not closed when B's last closed
	aAll     time.Duration   // from A's first start to A's last close
}

// fairnessRound starts burst tasks of tenant A, then fairnessFew of tenant
// B, waits for all, and measures them from the server's start and close
// times. With keys, B's are started by `starter run --tenant B` (which sets
// the fairness key) and A's with the same priority the starter gives; without,
// both are started with no priority at all. c is a client of the server
// env's processes talk to.
func fairnessRound(t *testing.T, c client.Client, sb *sandbox.Sandbox, env []string, queue, name string, burst int, keys bool) roundFigures {
	t.Helper()
	readsBefore := sb.GitHub.Stats().Requests
	stamp := time.Now().UnixNano()
	var aIDs, bIDs []string
	for i := range burst {
		id := fmt.Sprintf("e2e-fair-%s-a%d-%d", name, i, stamp)
		startDirect(t, c, queue, id, "A", keys)
		aIDs = append(aIDs, id)
	}
	var wg sync.WaitGroup
	for i := range fairnessFew {
		id := fmt.Sprintf("e2e-fair-%s-b%d-%d", name, i, stamp)
		bIDs = append(bIDs, id)
		if !keys {
			startDirect(t, c, queue, id, "B", false)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := runStarter(t, env, "run", "--prompt", "Read the README.", "--repo", branchRepo, "--model", fairnessModel, "--tenant", "B", "--id", id); r.code != 0 {
				t.Errorf("start %s: exit %d: %s", id, r.code, r.stderr)
			}
		}()
	}
	wg.Wait()
	f := roundFigures{name: name, burst: burst}
	var bLast time.Time
	for _, id := range bIDs {
		start, end := waitClosedOn(t, c, id)
		f.bEach = append(f.bEach, end.Sub(start))
		if end.After(bLast) {
			bLast = end
		}
	}
	sort.Slice(f.bEach, func(i, j int) bool { return f.bEach[i] < f.bEach[j] })
	f.bMax = f.bEach[len(f.bEach)-1]
	var aFirst, aLast time.Time
	for _, id := range aIDs {
		start, end := waitClosedOn(t, c, id)
		if end.After(bLast) {
			f.aOpenAtB++
		}
		if aFirst.IsZero() || start.Before(aFirst) {
			aFirst = start
		}
		if end.After(aLast) {
			aLast = end
		}
	}
	f.aAll = aLast.Sub(aFirst)
	if reads := sb.GitHub.Stats().Requests - readsBefore; reads < int64(burst+fairnessFew) {
		t.Errorf("%s: the sandbox GitHub served %d requests, want at least one read per task (%d)", name, reads, burst+fairnessFew)
	}
	return f
}

// startDirect starts a task of tenant through the client, as `starter run
// --prompt … --model fairnessModel --tenant TENANT` would (the
// input the starter builds for it); keys gives it the starter's priority,
// else none. Starting two hundred tasks through the starter binary would
// take longer than the slots take to run them, and there would be no burst.
func startDirect(t *testing.T, c client.Client, queue, id, tenant string, keys bool) {
	t.Helper()
	in := workflows.AgentTaskInput{TaskID: id, Tenant: tenant, Prompt: "Read the README.", Repo: branchRepo, Model: fairnessModel, MaxTurns: config.DefaultMaxTurns,
		HumanTimeout: config.DefaultHumanTimeout, ReconcileWindow: config.DefaultReconcileWindow,
		DependencyOutageLimit: config.DefaultDependencyOutageLimit, ApprovalTimeout: config.DefaultApprovalTimeout}
	opts := client.StartWorkflowOptions{ID: workflows.WorkflowID(id), TaskQueue: queue,
		TypedSearchAttributes: sdktemporal.NewSearchAttributes(workflows.AttrTenant.ValueSet(tenant))}
	if keys {
		opts.Priority = sdktemporal.Priority{FairnessKey: tenant}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.ExecuteWorkflow(ctx, opts, workflows.AgentTask, in); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
}

// waitClosed waits for a task to complete and returns the server's start
// and close times of its workflow.
func waitClosed(t *testing.T, taskID string) (start, end time.Time) {
	t.Helper()
	return waitClosedOn(t, temporal, taskID)
}

// waitClosedOn is waitClosed on the server c talks to.
func waitClosedOn(t *testing.T, c client.Client, taskID string) (start, end time.Time) {
	t.Helper()
	if res := waitLongOn(t, c, taskID); res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	d, err := c.DescribeWorkflow(context.Background(), workflows.WorkflowID(taskID), "")
	if err != nil {
		t.Fatal(err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	return info.GetStartTime().AsTime(), info.GetCloseTime().AsTime()
}
