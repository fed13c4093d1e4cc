package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestLongClusterDemo runs capstan on a real Temporal cluster (issue 35):
// the pinned server as four processes over PostgreSQL, with PostgreSQL
// advanced visibility (testenv.StartCluster, on CAPSTAN_TEST_POSTGRES_DSN's
// server). The first worker registers capstan's search attributes on SQL
// visibility; then, each with a sandbox and a worker of its own, side by
// side:
//   - demo: the sample task completes with every effect exactly once;
//   - approval: a pull request that needs approval is listed by `starter
//     list --awaiting-approval`, approved with its hash, and sent once;
//   - needs_human: a pull request whose answer is lost and which nobody can
//     look up is listed by `starter list --needs-human`, resolved by a
//     person with the URL found, and never sent twice.
//
// Skipped without the server or PostgreSQL, failed without them under
// CI=true (.ci/run installs both).
func TestLongClusterDemo(t *testing.T) {
	requireLong(t)
	c := testenv.StartCluster(t, testenv.ClusterOptions{})
	t.Run("demo", func(t *testing.T) {
		t.Parallel()
		sb := startSandbox(t)
		env := onServer(endpointEnv(t, "e2e-cluster-demo", sb), c.Addr)
		startWorker(t, env)
		checkSearchAttributes(t, c.Client(t))
		taskID := fmt.Sprintf("e2e-cluster-demo-%d", time.Now().UnixNano())
		start := time.Now()
		r := runStarter(t, env, "run",
			"--prompt", "Add a HELLO.md greeting, open a pull request and tell the team.",
			"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", "#capstan-e2e",
			"--model", "openai:demo", "--id", taskID, "--wait", "--json")
		if r.code != 0 {
			t.Fatalf("starter run exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		res := decodeResult(t, r)
		t.Logf("demo task on the cluster: %s in %s (starter run --wait, process start included)", res.Status, time.Since(start).Round(time.Millisecond))
		if res.Status != workflows.StatusCompleted || len(res.Turns) != 4 || len(res.Operations) != 3 || len(res.Deliveries) != 1 {
			t.Fatalf("result = %s, %d turns, %d operations, %d deliveries; want completed, 4, 3, 1", res.Status, len(res.Turns), len(res.Operations), len(res.Deliveries))
		}
		for _, op := range res.Operations {
			if op.State != capstan.OutcomeSucceeded || op.ExternalID == "" {
				t.Errorf("operation %+v, want succeeded with an external id", op)
			}
		}
		gh, sl := sb.GitHub.Stats(), sb.Slack.Stats()
		if gh.BranchesCreated != 1 || gh.FilesWritten != 1 || gh.PullRequestsCreated != 1 || gh.CommentsCreated != 0 || sl.MessagesPosted != 1 {
			t.Errorf("effects: github %+v, slack %+v; want 1 branch, 1 file, 1 pull request, 0 comments, 1 Slack post", gh, sl)
		}
		if ls := runStarter(t, env, "list"); ls.code != 0 || !strings.Contains(ls.stdout, taskID) {
			t.Errorf("starter list (SQL visibility): exit %d, stdout %q, stderr %q; want the task listed", ls.code, ls.stdout, ls.stderr)
		}
	})
	t.Run("approval", func(t *testing.T) {
		t.Parallel()
		sb := startSandbox(t)
		log := &githubLog{}
		sb.GitHub.SetFault(log.hook)
		env := onServer(endpointEnv(t, "e2e-cluster-approve", sb), c.Addr)
		startWorker(t, env)
		taskID, op := startApprovalTask(t, env, "cluster-approve") // listed by `starter list --awaiting-approval`
		if got := pullRequestPosts(log); len(got) != 0 {
			t.Fatalf("while the pull request awaits approval, requests reached the pull-request endpoint: %q", got)
		}
		if r := runStarter(t, env, "approve", taskID, op.OperationID, "--hash", op.CallHash, "--as", "alice"); r.code != 0 ||
			!strings.Contains(r.stdout, "approved by alice") {
			t.Fatalf("approve: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		res := clusterResult(t, c.Client(t), taskID)
		if res.Status != workflows.StatusCompleted {
			t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
		}
		if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 || st.BranchesCreated != 1 || st.FilesWritten != 1 || len(pullRequestPosts(log)) != 1 {
			t.Errorf("github stats = %+v, pull-request posts %d; want exactly 1 branch, 1 file, 1 pull request", st, len(pullRequestPosts(log)))
		}
		if ls := runStarter(t, env, "list", "--awaiting-approval"); ls.code != 0 || strings.Contains(ls.stdout, taskID) {
			t.Errorf("starter list --awaiting-approval after the approval: exit %d, stdout %q; want the task gone from it", ls.code, ls.stdout)
		}
	})
	t.Run("needs_human", func(t *testing.T) {
		t.Parallel()
		sb := startSandbox(t)
		for _, rule := range []sandbox.FaultRule{
			{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
			{Endpoint: "pulls/list", Kind: sandbox.FaultFail}, // every time: the reconciler cannot ask
		} {
			if err := sb.GitHub.AddFault(rule); err != nil {
				t.Fatal(err)
			}
		}
		env := append(onServer(endpointEnv(t, "e2e-cluster-person", sb), c.Addr), "CAPSTAN_RECONCILE_WINDOW=2s")
		startWorker(t, env)
		taskID := fmt.Sprintf("e2e-cluster-person-%d", time.Now().UnixNano())
		if r := runStarter(t, env, "run", "--prompt", prPrompt, "--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", taskID); r.code != 0 {
			t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
		}
		opID := waitNeedsHuman(t, env, taskID) // listed by `starter list --needs-human`
		prs := sb.GitHub.PullRequests("capstan-sandbox/demo")
		if len(prs) != 1 {
			t.Fatalf("pull requests = %d, want the 1 whose answer was lost", len(prs))
		}
		url := fmt.Sprintf("%s/capstan-sandbox/demo/pull/%d", strings.TrimRight(sb.GitHubURL, "/"), prs[0].Number)
		if r := runStarter(t, env, "resolve", taskID, opID, "--found", url); r.code != 0 || !strings.Contains(r.stdout, "resolved as found") {
			t.Fatalf("resolve --found: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		res := clusterResult(t, c.Client(t), taskID)
		if res.Status != workflows.StatusCompleted {
			t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
		}
		if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 || st.BranchesCreated != 1 || st.FilesWritten != 1 {
			t.Errorf("github stats = %+v, want exactly 1 branch, 1 file, 1 pull request", st)
		}
		if ls := runStarter(t, env, "list", "--needs-human"); ls.code != 0 || strings.Contains(ls.stdout, taskID) {
			t.Errorf("starter list --needs-human after the resolution: exit %d, stdout %q; want the task gone from it", ls.code, ls.stdout)
		}
	})
}

// checkSearchAttributes: every one of capstan's search attributes is
// registered on the cluster's SQL visibility with its type — the worker
// registered them at its start.
func checkSearchAttributes(t *testing.T, c client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range workflows.SearchAttributes {
		got, ok := list.GetCustomAttributes()[key.GetName()]
		if !ok || got != key.GetValueType() {
			t.Errorf("search attribute %s on the cluster: %v (registered %v), want %v", key.GetName(), got, ok, key.GetValueType())
		}
	}
}

// clusterResult waits for the task's workflow on the cluster to close and
// returns its result.
func clusterResult(t *testing.T, c client.Client, taskID string) workflows.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := c.GetWorkflow(ctx, workflows.WorkflowID(taskID), "").Get(ctx, &res); err != nil {
		t.Fatalf("task %s: %v", taskID, err)
	}
	return res
}

// TestLongClusterRollingDeploy is TestLongRollingDeploy on a real cluster
// (Worker Versioning's deployment versions, on by default at the pinned
// server — system.enableDeploymentVersions — over PostgreSQL): tasks held on
// build v1 finish on v1 after v2 is made current, new tasks run on v2, and
// v1 drains (the cluster has the tests' 2 s drainage refresh, as their dev
// servers do) and its worker stops gracefully.
func TestLongClusterRollingDeploy(t *testing.T) {
	requireLong(t)
	c := startCapstanCluster(t, testenv.ClusterOptions{})
	rollingDeploy(t, c.Client(t), c.Addr)
}

// TestLongClusterFairness is TestLongFairness's measured rounds on a real
// cluster, whose matching service runs the fair matcher over PostgreSQL's
// tasks_v2 (matching.enableFairness and one partition per queue, from
// deploy/temporal/dynamicconfig.yaml): on a worker with two activity slots
// tenant A starts fairnessBurst tasks, then tenant B fairnessFew with
// `starter run --tenant B`; B's tasks must complete while most of A's still
// wait, within 3× their latency on an idle pool. (The round without keys,
// which TestLongFairness logs beside, is not repeated here.)
func TestLongClusterFairness(t *testing.T) {
	requireLong(t)
	c := startCapstanCluster(t, testenv.ClusterOptions{})
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultDelay, Delay: fairnessReadDelay}); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("e2e-cluster-fair-%d", time.Now().UnixNano())
	env := append(onServer(endpointEnv(t, queue, sb), c.Addr), fmt.Sprintf("CAPSTAN_ACTIVITY_SLOTS=%d", fairnessSlots))
	startWorker(t, env)

	idle := fairnessRound(t, c.Client(t), sb, env, queue, "idle", 0, true)
	fair := fairnessRound(t, c.Client(t), sb, env, queue, "fair", fairnessBurst, true)
	for _, r := range []roundFigures{idle, fair} {
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
