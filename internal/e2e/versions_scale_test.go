package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/internal/workflows"
)

// openTasksAtScale is how many open tasks TestLongVersionsAtScale reports
// on: the order of magnitude the design says `starter versions` is built
// for (docs/design.md §3.4).
const openTasksAtScale = 10_000

// TestLongVersionsAtScale measures `starter versions` over ten thousand
// open tasks on a dev server of its own. No worker polls their queue, so
// each stays open with the two events of its start and no marker, as a
// task queued behind a busy pool would. Half carry the stamp today's
// starter puts on a task (workflows.CurrentLogic: they will run with every
// change in effect and record no marker), half carry none, as an older
// starter's would: each of those may still take every change's old branch.
// The report must count all of them under the unversioned build and, for
// every change the stamp covers, exactly the unstamped half — for a change
// read on its own marker by stamped tasks too (Change.OwnMarkerOnly, such
// as approvals-bound), all of them, since none has reached it; it must say
// how far it has got
// on stderr while it works. The time it took is logged, with the time the
// starts took beside it for scale.
func TestLongVersionsAtScale(t *testing.T) {
	requireLong(t)
	ctx := context.Background()
	flags, err := testenv.DevServerFlags()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testenv.StartDevServer(ctx, nil, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	if err := workerapp.EnsureSearchAttributes(ctx, c, "default", slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("e2e-versions-scale-%d", time.Now().UnixNano())
	env := onServer(baseEnv(t, queue), srv.FrontendHostPort())

	began := time.Now()
	unstamped := startOpenTasks(t, c, queue, openTasksAtScale)
	startsTook := time.Since(began)
	waitForOpenTasks(t, c, openTasksAtScale)

	began = time.Now()
	r := runStarter(t, env, "versions", "--json")
	versionsTook := time.Since(began)
	if r.code != 0 {
		t.Fatalf("starter versions: exit %d: %s", r.code, r.stderr)
	}
	rep := decodeVersions(t, r.stdout)
	if len(rep.Builds) != 1 || rep.Builds[0].Build != "unversioned" || rep.Builds[0].Open != openTasksAtScale {
		t.Errorf("builds = %+v; want only unversioned with %d open tasks", rep.Builds, openTasksAtScale)
	}
	if len(rep.Changes) == 0 {
		t.Fatal("starter versions reports no change")
	}
	ownMarkerOnly := map[string]bool{}
	for _, c := range workflows.Changes {
		ownMarkerOnly[c.ID] = c.OwnMarkerOnly
	}
	for _, ch := range rep.Changes {
		want, whose := unstamped, "unstamped"
		if ownMarkerOnly[ch.ID] {
			want, whose = openTasksAtScale, "open" // read on its own marker, stamped or not
		}
		if ch.MayNeedOld != want || ch.Retire {
			t.Errorf("change %s: %d open tasks may take its old branch (retire %t); want the %d %s ones", ch.ID, ch.MayNeedOld, ch.Retire, want, whose)
		}
	}
	if done := fmt.Sprintf("read %d of %d open tasks", openTasksAtScale, openTasksAtScale); !strings.Contains(r.stderr, done) {
		t.Errorf("starter versions did not end its progress on stderr with %q:\n%s", done, r.stderr)
	}
	t.Logf("starter versions over %d open tasks (%d unstamped): %s; starting them took %s",
		openTasksAtScale, unstamped, versionsTook.Round(10*time.Millisecond), startsTook.Round(10*time.Millisecond))
}

// startOpenTasks starts n AgentTasks on queue, 32 at a time, as `starter
// run` starts one (its start attributes), every other one without the
// starter's stamp. It returns how many went unstamped.
func startOpenTasks(t *testing.T, c client.Client, queue string, n int) int {
	t.Helper()
	ids := make(chan int)
	var wg sync.WaitGroup
	var unstamped atomic.Int64
	var failed atomic.Pointer[error]
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				id := fmt.Sprintf("scale-%s-%d", queue, i)
				in := workflows.AgentTaskInput{TaskID: id, Prompt: "Hold.", Repo: branchRepo, Model: "openai:demo", Logic: workflows.CurrentLogic}
				if i%2 == 1 {
					in.Logic = 0
					unstamped.Add(1)
				}
				_, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
					ID: workflows.WorkflowID(id), TaskQueue: queue,
					TypedSearchAttributes: sdktemporal.NewSearchAttributes(workflows.StartAttributes(in)...),
				}, workflows.AgentTask, in)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range n {
		if failed.Load() != nil {
			break
		}
		ids <- i
	}
	close(ids)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("start the open tasks: %v", *err)
	}
	return int(unstamped.Load())
}

// waitForOpenTasks waits until the server's visibility, which `starter
// versions` lists from, counts n running AgentTasks.
func waitForOpenTasks(t *testing.T, c client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		res, err := c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Query: "WorkflowType = 'AgentTask' AND ExecutionStatus = 'Running'"})
		if err == nil && res.GetCount() == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("visibility counts %d running tasks (%v); want %d", res.GetCount(), err, n)
		}
		<-poll.C // visibility catches up with the starts on its own: nothing to wait on but the count
	}
}
