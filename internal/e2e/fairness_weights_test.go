package e2e

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The weighted run's shape: each tenant's backlog, the weight of the
// heavier tenant, the worker's one activity slot, and how long the sandbox
// GitHub holds each task's read (so that slot, not the machine, decides
// the order).
const (
	weightedEach      = 24
	weightedHeavy     = 3
	weightedReadDelay = 500 * time.Millisecond
	starterAtOnce     = 6 // starter processes run at once to start the backlog
)

// TestLongTenantWeights: tenants "heavy" (weight weightedHeavy in
// CAPSTAN_TENANT_WEIGHTS) and "light" (unlisted: weight 1) each queue
// weightedEach tasks through `starter run --tenant`, before any worker
// polls; then a worker with one activity slot starts. The server dispatches
// the two tenants' activities in proportion to their weights: until
// heavy's last task completes, heavy's activities start about
// weightedHeavy times as often as light's (between 2× and 4.5×, the test
// asks; equal weights would be about 1×, and light starved entirely would
// be none of light's). The share is of activity starts, not of completed
// tasks: the server orders each tenant's tasks by a virtual time that
// advances 1/weight per task queued, so every activity of heavy's tasks
// (three each) runs at three times light's pace and heavy's tasks all
// finish before light's, each of which has run its first activity. The
// same backlog with no weights set is measured beside it and logged.
func TestLongTenantWeights(t *testing.T) {
	requireLong(t)
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultDelay, Delay: weightedReadDelay}); err != nil {
		t.Fatal(err)
	}
	weighted := weightedRound(t, sb, "weighted", fmt.Sprintf("heavy=%d", weightedHeavy))
	equal := weightedRound(t, sb, "equal", "")
	for _, r := range []weightedFigures{weighted, equal} {
		t.Logf("%-8s until heavy's last of %d tasks completed (%s after the worker started): heavy's activities started %d, light's %d (%.2f:1); light's tasks completed %d",
			r.name, weightedEach, r.heavyDone.Round(time.Millisecond), r.heavyActs, r.lightActs, r.ratio(), r.lightTasks)
	}
	if r := weighted.ratio(); r < 2 || r > 4.5 {
		t.Errorf("with heavy weighing %d, heavy's activities started %.2f times as often as light's (%d against %d); want between 2 and 4.5",
			weightedHeavy, r, weighted.heavyActs, weighted.lightActs)
	}
}

// weightedFigures are counted up to heavy's last task's close.
type weightedFigures struct {
	name                 string
	heavyActs, lightActs int           // activity starts of each tenant
	lightTasks           int           // light's tasks closed
	heavyDone            time.Duration // from the worker's start to heavy's last close
}

func (f weightedFigures) ratio() float64 {
	if f.lightActs == 0 {
		return math.Inf(1)
	}
	return float64(f.heavyActs) / float64(f.lightActs)
}

// weightedRound queues weightedEach tasks of each tenant on a queue of its
// own through the starter (with CAPSTAN_TENANT_WEIGHTS=weights, as a
// person's shell would hold it), alternating the tenants, then starts the
// round's worker and counts, from the tasks' histories, the activities of
// each that started before heavy's last task closed.
func weightedRound(t *testing.T, sb *sandbox.Sandbox, name, weights string) weightedFigures {
	t.Helper()
	queue := fmt.Sprintf("e2e-weights-%s-%d", name, time.Now().UnixNano())
	env := append(endpointEnv(t, queue, sb), "CAPSTAN_ACTIVITY_SLOTS=1", "CAPSTAN_TENANT_WEIGHTS="+weights)
	ids := map[string][]string{}
	type start struct{ tenant, id string }
	starts := make(chan start)
	var wg sync.WaitGroup
	for range starterAtOnce {
		wg.Go(func() {
			for s := range starts {
				if r := runStarter(t, env, "run", "--prompt", "Read the README.", "--repo", branchRepo, "--model", fairnessModel,
					"--tenant", s.tenant, "--id", s.id); r.code != 0 {
					t.Errorf("start %s: exit %d: %s", s.id, r.code, r.stderr)
				}
			}
		})
	}
	for i := range weightedEach {
		for _, tenant := range []string{"heavy", "light"} {
			id := fmt.Sprintf("%s-%s%d", queue, tenant, i)
			ids[tenant] = append(ids[tenant], id)
			starts <- start{tenant, id}
		}
	}
	close(starts)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	began := time.Now()
	startWorker(t, env)
	closed := map[string]time.Time{}
	var heavyLast time.Time
	for _, tenant := range []string{"heavy", "light"} {
		for _, id := range ids[tenant] {
			_, end := waitClosed(t, id)
			closed[id] = end
			if tenant == "heavy" && end.After(heavyLast) {
				heavyLast = end
			}
		}
	}
	f := weightedFigures{name: name, heavyDone: heavyLast.Sub(began)}
	for _, tenant := range []string{"heavy", "light"} {
		for _, id := range ids[tenant] {
			if tenant == "light" && closed[id].Before(heavyLast) {
				f.lightTasks++
			}
			for _, ev := range fetchHistory(t, workflows.WorkflowID(id)).GetEvents() {
				if ev.GetActivityTaskStartedEventAttributes() == nil || !ev.GetEventTime().AsTime().Before(heavyLast) {
					continue
				}
				if tenant == "heavy" {
					f.heavyActs++
				} else {
					f.lightActs++
				}
			}
		}
	}
	return f
}
