package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Game day (issue 18): the figures of one run are logged at its end.
const (
	gameDayTasks    = 60
	gameDayWorkers  = 3
	gameDayChannel  = "#capstan-gameday"
	demoModelTurns  = 4 // the demo script: branch, file, pull request, answer
	serverKillAfter = 20
)

// TestLongGameDay is issue 18's game day: 60 demo tasks (a branch, a file,
// a pull request, a Slack post each) on three workers sharing one task
// queue and ledger, on a dev server of the test's own. While they run, one
// worker is SIGKILLed every few seconds and started again; GitHub and Slack
// lose the answer of every third or fourth write after acting, or refuse it
// with 502 before acting (periodicFaults); and once 20 tasks have completed
// the Temporal server is SIGKILLed and started again on the same port with
// the same database file. Every task must complete with no person asked
// (no NEEDS_HUMAN, no approval, no dead letter, in any history) and every
// effect exactly once per task, counted in the sandbox. The wall time and
// the model requests against the minimum (60 × the demo's 4 turns) are
// logged.
func TestLongGameDay(t *testing.T) {
	requireLong(t)
	began := time.Now()
	srv := startKillableServer(t)
	sb := startSandbox(t)
	faults := newPeriodicFaults()
	faults.install(sb.GitHub, githubWrite)
	faults.install(sb.Slack, slackWrite)

	env := onServer(endpointEnv(t, "e2e-gameday", sb), srv.addr)
	workers := make([]*workerProcess, gameDayWorkers)
	for i := range workers {
		workers[i] = startWorker(t, env)
	}

	prefix := fmt.Sprintf("gd%d", time.Now().UnixNano()%1e9)
	ids := make([]string, gameDayTasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	startedAll := make(chan error, 1)
	go func() { startedAll <- startGameDayTasks(env, ids) }()

	results := make([]workflows.TaskResult, len(ids))
	resultErrs := make([]error, len(ids))
	var completed atomic.Int32
	allDone := make(chan struct{})
	collectCtx, stopCollecting := context.WithTimeout(context.Background(), 20*time.Minute)
	defer stopCollecting()
	go func() {
		defer close(allDone)
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				results[i], resultErrs[i] = awaitTask(collectCtx, srv, id)
				completed.Add(1)
			})
		}
		wg.Wait()
	}()

	ch := gameDayChaos{t: t, srv: srv, env: env, workers: workers, rng: rand.New(rand.NewPCG(18, uint64(began.UnixNano())))}
	started := false
	for done := false; !done; {
		select {
		case <-allDone:
			done = true
			continue
		case err := <-startedAll:
			if err != nil {
				t.Fatalf("start the tasks: %v", err)
			}
			started, ch.tasksStarted = true, time.Now()
			t.Logf("%d tasks started %s after the test began", len(ids), time.Since(began).Round(time.Millisecond))
		case <-time.After(time.Duration(2000+ch.rng.IntN(3000)) * time.Millisecond): // "every few seconds": a chosen pause, no event to wait on
		}
		if started && ch.serverKilled.IsZero() && completed.Load() >= serverKillAfter {
			ch.killServer(int(completed.Load()))
		} else {
			ch.killWorker()
		}
		ch.noPersonAsked(prefix)
	}
	wall := time.Since(began)

	checkGameDayResults(t, srv, ids, results, resultErrs)
	checkGameDayEffects(t, sb, ids, results)

	faultLog, injected := faults.summary(sb.GitHub.Faults(), sb.Slack.Faults())
	minimum := gameDayTasks * demoModelTurns
	requests := sb.Model.Stats().ScriptRequests["demo"]
	t.Logf("game day: %d tasks on %d workers, wall time %s (all started at %s, the server SIGKILLed at %s with %d completed, back %s later)",
		gameDayTasks, gameDayWorkers, wall.Round(time.Second), ch.tasksStarted.Sub(began).Round(time.Second), ch.serverKilled.Sub(began).Round(time.Second),
		ch.completedAtKill, ch.serverDown.Round(100*time.Millisecond))
	t.Logf("game day: model requests %d against the minimum %d (%d tasks × %d turns): %+d", requests, minimum, gameDayTasks,
		demoModelTurns, int(requests)-minimum)
	t.Logf("game day: %d worker SIGKILLs (and restarts), 1 server SIGKILL; %d faults injected:%s", ch.workerKills, injected, faultLog)
	if injected == 0 || ch.workerKills == 0 || ch.serverKilled.IsZero() {
		t.Errorf("the game day was not played: %d faults, %d worker kills, server killed %v", injected, ch.workerKills, !ch.serverKilled.IsZero())
	}
}

// startGameDayTasks starts every task with `starter run` (no --wait), as a
// user would, six at a time.
func startGameDayTasks(env []string, ids []string) error {
	sem := make(chan struct{}, 6)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, starterBin, "run",
				"--prompt", "Add a HELLO.md greeting, open a pull request and tell the team.",
				"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", gameDayChannel,
				"--model", "openai:demo", "--id", id)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("starter run %s: %v: %s", id, err, out)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// awaitTask waits for the task's workflow to close and returns its result.
// An error reaching the server (it may be down) is retried with the
// server's current client until ctx ends; a failed workflow is returned.
func awaitTask(ctx context.Context, srv clientSource, taskID string) (workflows.TaskResult, error) {
	var res workflows.TaskResult
	for {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := srv.Client().GetWorkflow(gctx, workflows.WorkflowID(taskID), "").Get(gctx, &res)
		cancel()
		var failed *sdktemporal.WorkflowExecutionError
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &failed):
			return res, err
		case ctx.Err() != nil:
			return res, fmt.Errorf("task %s did not finish: %w", taskID, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // the server may be down: no event to wait on
		}
	}
}

// clientSource hands out a client of a server that may be restarted: the
// dev server's current run (killableServer) or a cluster's frontend.
type clientSource interface{ Client() client.Client }

// gameDayChaos kills what the game day kills.
type gameDayChaos struct {
	t       *testing.T
	srv     *killableServer
	env     []string
	workers []*workerProcess
	rng     *rand.Rand

	workerKills     int
	serverKilled    time.Time
	serverDown      time.Duration
	completedAtKill int
	tasksStarted    time.Time
}

// killWorker SIGKILLs the workers by turns and starts each again at once.
func (c *gameDayChaos) killWorker() {
	i := c.workerKills % len(c.workers)
	c.workers[i].stop(c.t, syscall.SIGKILL, 30*time.Second)
	c.workers[i] = startWorker(c.t, c.env)
	c.workerKills++
}

// killServer SIGKILLs the Temporal server and starts it again on the same
// port with the same database file.
func (c *gameDayChaos) killServer(completed int) {
	pid := c.srv.pid()
	c.serverKilled = time.Now()
	c.completedAtKill = completed
	c.srv.kill(c.t)
	c.srv.start(c.t)
	c.serverDown = time.Since(c.serverKilled)
	c.t.Logf("SIGKILLed the Temporal server (pid %s) with %d tasks completed; %s answered again %s later",
		pid, completed, c.srv, c.serverDown.Round(100*time.Millisecond))
}

// noPersonAsked fails the test at once when a task of the game day waits
// for a person or an approval: such a task would never complete by itself.
func (c *gameDayChaos) noPersonAsked(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.srv.Client().ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: workflows.FlagQuery(workflows.FlagNeedsHuman, false) + " OR " + workflows.FlagQuery(workflows.FlagAwaitingApproval, false),
	})
	if err != nil {
		return // visibility may lag or the server be starting: the histories are checked at the end
	}
	var asked []string
	for _, ex := range resp.GetExecutions() {
		if id := ex.GetExecution().GetWorkflowId(); strings.Contains(id, prefix) {
			asked = append(asked, id)
		}
	}
	if len(asked) > 0 {
		for _, id := range asked {
			st := runStarter(c.t, c.env, "status", strings.TrimPrefix(id, "task-"), "--json")
			c.t.Logf("%s asks a person:\n%s%s", id, st.stdout, st.stderr)
		}
		c.t.Fatalf("a person was asked: %v", asked)
	}
}

// checkGameDayResults: every task completed, every operation and delivery
// succeeded, nothing resolved by a person, and no history ever set the
// search attributes of a person asked.
func checkGameDayResults(t *testing.T, srv clientSource, ids []string, results []workflows.TaskResult, errs []error) {
	t.Helper()
	ok := 0
	for i, id := range ids {
		res := results[i]
		if errs[i] != nil || res.Status != workflows.StatusCompleted {
			t.Errorf("task %s: %s %s %s (%v)", id, res.Status, res.FailureCode, res.Message, errs[i])
			continue
		}
		ok++
		for _, op := range res.Operations {
			if op.State != capstan.OutcomeSucceeded || op.ResolvedBy != "" {
				t.Errorf("task %s: operation %s %s resolved by %q", id, op.Tool, op.State, op.ResolvedBy)
			}
		}
		if len(res.Operations) != 3 || len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded {
			t.Errorf("task %s: %d operations, deliveries %+v; want 3 and one succeeded", id, len(res.Operations), res.Deliveries)
		}
		if set := askedAnyone(t, srv.Client(), workflows.WorkflowID(id)); len(set) > 0 {
			t.Errorf("task %s asked someone: %v", id, set)
		}
	}
	t.Logf("%d of %d tasks completed", ok, len(ids))
}

// checkGameDayEffects counts every effect per task in the sandbox. The fakes
// count each effect they performed once, a lost answer's included; with 60
// branches and 60 file writes in all, and each task's branch holding its
// file, each task has exactly one of both. Pull requests and Slack posts
// are counted per task directly: by head branch, and by the delivery's
// operation id in the message's metadata.
func checkGameDayEffects(t *testing.T, sb *sandbox.Sandbox, ids []string, results []workflows.TaskResult) {
	t.Helper()
	const repo = "capstan-sandbox/demo"
	n := int64(len(ids))
	gh, sl := sb.GitHub.Stats(), sb.Slack.Stats()
	if gh.BranchesCreated != n || gh.FilesWritten != n || gh.PullRequestsCreated != n || gh.CommentsCreated != 0 || sl.MessagesPosted != n {
		t.Errorf("effects: %d branches, %d file writes, %d pull requests, %d comments, %d Slack posts; want %d, %d, %d, 0, %d",
			gh.BranchesCreated, gh.FilesWritten, gh.PullRequestsCreated, gh.CommentsCreated, sl.MessagesPosted, n, n, n, n)
	}
	prs := map[string][]sandbox.SandboxPR{}
	for _, pr := range sb.GitHub.PullRequests(repo) {
		prs[pr.Head] = append(prs[pr.Head], pr)
	}
	posts := map[any]int{}
	for _, m := range sb.Slack.Messages(gameDayChannel) {
		posts[m.Metadata.EventPayload["operation_id"]]++
	}
	for i, id := range ids {
		branch := "capstan/hello-" + id
		if code := getStatus(t, sb.GitHubURL+"repos/"+repo+"/contents/HELLO.md?ref="+branch); code != http.StatusOK {
			t.Errorf("task %s: HELLO.md on %s: status %d, want 200 (the branch and its file)", id, branch, code)
		}
		if len(prs[branch]) != 1 {
			t.Errorf("task %s: %d pull requests from %s, want 1: %+v", id, len(prs[branch]), branch, prs[branch])
		}
		if len(results[i].Deliveries) == 1 {
			if got := posts[results[i].Deliveries[0].OperationID]; got != 1 {
				t.Errorf("task %s: %d Slack posts of delivery %s, want 1", id, got, results[i].Deliveries[0].OperationID)
			}
		}
	}
}

// getStatus is the status of a GET of url with the worker's GitHub token.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+githubTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
