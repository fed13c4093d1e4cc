package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
	"github.com/capstanhq/capstan/internal/workflows"
)

// runHello runs the one-turn hello task under id in env's namespace with
// prompt, and
// checks that it completed with its Slack delivery acknowledged.
func runHello(t *testing.T, env []string, id, prompt string) workflows.TaskResult {
	t.Helper()
	r := runStarter(t, env, "run", "--prompt", prompt, "--model", "openai:hello",
		"--slack", "#x", "--id", id, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run --id %s exited %d\nstdout: %s\nstderr: %s", id, r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded {
		t.Fatalf("task %s: status %s, deliveries %+v; want completed with one delivery succeeded", id, res.Status, res.Deliveries)
	}
	return res
}

// chainScope is the scope the task's ledger keys carry
// (workflows.ChainScope): namespace "default" and its workflow's first run.
func chainScope(t *testing.T, workflowID string) string {
	t.Helper()
	desc, err := describe(context.Background(), workflowID)
	if err != nil {
		t.Fatal(err)
	}
	return workflows.ChainScope("default", desc.GetWorkflowExecutionInfo().GetFirstRunId())
}

// deleteExecution deletes the task's workflow from the dev server, as
// retention does, and waits until the server no longer knows it.
func deleteExecution(t *testing.T, c client.Client, namespace, workflowID string) {
	t.Helper()
	deleteRun(t, c, namespace, workflowID, "")
}

// deleteRun deletes one run of a workflow (its current run when runID is
// empty) and waits until the server no longer knows it. The server deletes
// in a task of its own, which a busy machine can hold back for over a
// minute (seen once in CI with other builds running), so the wait is
// three.
func deleteRun(t *testing.T, c client.Client, namespace, workflowID, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
	}); err != nil {
		t.Fatalf("delete workflow %s: %v", workflowID, err)
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		_, err := c.WorkflowService().DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
			Namespace: namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID}})
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflow %s still described three minutes after its deletion (last answer: %v)", workflowID, err)
		case <-poll.C: // deletion is asynchronous and announces nothing: poll it
		}
	}
}

// TestReusedTaskIDRunsAsNewTask (issue 14 items 3 and 10): a task started with the
// id of one whose history Temporal no longer has — deleted here, as
// retention deletes it — runs as a new task. Before ledger keys were scoped
// to the execution chain, it found the old task's committed turn and
// acknowledged delivery in the ledger and "completed" without calling the
// model or posting anything. Then starter gc removes the first task's rows
// (checkGC).
func TestReusedTaskIDRunsAsNewTask(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-reuse", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-reuse-%d", time.Now().UnixNano())
	first := runHello(t, env, taskID, "Say hello to the team.")
	before := countEffects(sb)
	t.Logf("after the first task: %s", before)

	deleteExecution(t, temporal, "default", first.WorkflowID)
	// Another prompt: the two tasks share some items by content (the
	// system prompt, the answer) and not others (the prompts).
	second := runHello(t, env, taskID, "Say hello to the new team.")
	after := countEffects(sb)
	t.Logf("after the second task with the same id: %s; its delivery %s", after, second.Deliveries[0].OperationID)
	if got := after.ModelRequests - before.ModelRequests; got != 1 {
		t.Errorf("the second task made %d model requests, want 1: it must run as a new task", got)
	}
	if got := after.SlackMessages - before.SlackMessages; got != 1 {
		t.Errorf("the second task posted %d Slack messages, want 1", got)
	}
	if second.Deliveries[0].OperationID == first.Deliveries[0].OperationID {
		t.Fatalf("both tasks named their delivery %s; a reused id must get ledger keys of its own", first.Deliveries[0].OperationID)
	}
	checkGC(t, env, taskID, first.Deliveries[0].OperationID, second.Deliveries[0].OperationID)
}

// checkGC (issue 14 item 10) runs `starter gc --older-than 0s` after the
// first task's history was deleted: it removes that chain's rows and the
// items only it referred to, and leaves the second task — closed, but
// still in Temporal — and the items both share by content alone.
func checkGC(t *testing.T, env []string, taskID, goneOp, keptOp string) {
	t.Helper()
	db := rawLedger(t, env)
	gone, kept := scopeOfOp(t, goneOp, taskID), scopeOfOp(t, keptOp, taskID)
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const sharedQ = "SELECT count(*) FROM item_refs a JOIN item_refs b ON a.ref = b.ref JOIN items i ON i.ref = a.ref WHERE a.scope = ? AND b.scope = ?"
	const ownQ = "SELECT count(*) FROM item_refs r JOIN items i ON i.ref = r.ref WHERE r.scope = ?"
	shared, keptItems := count(sharedQ, gone, kept), count(ownQ, kept)
	unshared := count("SELECT count(*) FROM item_refs r WHERE r.scope = ?1 AND NOT EXISTS (SELECT 1 FROM item_refs o WHERE o.ref = r.ref AND o.scope <> ?1)", gone)
	if shared == 0 || unshared == 0 {
		t.Fatalf("the deleted task shares %d items with the other and has %d of its own; the test needs both", shared, unshared)
	}
	t.Logf("before gc the deleted task refers to %d items of its own and shares %d with the retained one", unshared, shared)
	dry := runStarter(t, env, "gc", "--older-than", "0s", "--dry-run")
	t.Logf("starter gc --older-than 0s --dry-run:\n%s", dry.stdout)
	if want := fmt.Sprintf("would delete 1 task(s): 1 operation(s), 1 turn(s), %d item(s), ", unshared); dry.code != 0 || !strings.HasPrefix(dry.stdout, want) {
		t.Fatalf("gc --dry-run exited %d:\n%s%s\nwant %q…", dry.code, dry.stdout, dry.stderr, want)
	}
	if n := count("SELECT count(*) FROM turns WHERE scope = ?", gone); n != 1 {
		t.Fatalf("after the dry run the deleted task has %d turns in the ledger, want its 1", n)
	}
	r := runStarter(t, env, "gc", "--older-than", "0s")
	t.Logf("starter gc --older-than 0s:\n%s", r.stdout)
	if r.code != 0 || r.stdout != strings.Replace(dry.stdout, "would delete", "deleted", 1) {
		t.Fatalf("gc exited %d with\n%s%s\nwant what the dry run said it would delete", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "kept 1 of 2 task(s) older than 0s that Temporal still has") {
		t.Errorf("gc did not say it kept the second task, which Temporal still has")
	}
	for _, q := range []string{"SELECT count(*) FROM turns WHERE scope = ?", "SELECT count(*) FROM tasks WHERE scope = ?",
		"SELECT count(*) FROM item_refs WHERE scope = ?"} {
		if n := count(q, gone); n != 0 {
			t.Errorf("%s [the deleted task] = %d after gc, want 0", q, n)
		}
	}
	if n := count("SELECT count(*) FROM operations WHERE operation_id = ?", goneOp); n != 0 {
		t.Errorf("the deleted task's delivery %s is still in the ledger after gc", goneOp)
	}
	if n := count("SELECT count(*) FROM operations WHERE operation_id = ?", keptOp); n != 1 {
		t.Errorf("gc removed the retained task's delivery %s", keptOp)
	}
	if n, m := count("SELECT count(*) FROM turns WHERE scope = ?", kept), count(ownQ, kept); n != 1 || m != keptItems {
		t.Errorf("the retained task has %d turn(s) and %d of its %d items after gc, want its 1 turn and every item", n, m, keptItems)
	}
	if n := count("SELECT count(*) FROM item_refs r WHERE r.scope = ? AND NOT EXISTS (SELECT 1 FROM items i WHERE i.ref = r.ref)", kept); n != 0 {
		t.Errorf("gc deleted %d items the retained task refers to (it shared %d with the deleted one)", n, shared)
	}
}

// scopeOfOp is the chain scope in the operation id op of task taskID.
func scopeOfOp(t *testing.T, op, taskID string) string {
	t.Helper()
	_, rest, ok := strings.Cut(op, ":"+taskID+":")
	scope, _, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || !strings.HasPrefix(scope, "~") {
		t.Fatalf("operation %s carries no chain scope", op)
	}
	return scope
}

// rawLedger opens the worker's SQLite ledger file for queries of its own.
func rawLedger(t *testing.T, env []string) *sql.DB {
	t.Helper()
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "CAPSTAN_LEDGER_DSN=sqlite://"); ok {
			path = p
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// registerNamespace registers ns on the dev server and waits until its
// frontend serves it (the namespace cache learns of it on its own time).
func registerNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := temporal.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		t.Fatalf("register namespace %s: %v", ns, err)
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		_, err := temporal.WorkflowService().ListOpenWorkflowExecutions(ctx, &workflowservice.ListOpenWorkflowExecutionsRequest{Namespace: ns, MaximumPageSize: 1})
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s not served a minute after it was registered: %v", ns, err)
		case <-poll.C: // the frontend's namespace cache refreshes on a timer: poll it
		}
	}
}

// withNamespace is env with TEMPORAL_NAMESPACE set to ns.
func withNamespace(env []string, ns string) []string {
	out := slices.Clone(env)
	for i, kv := range out {
		if strings.HasPrefix(kv, "TEMPORAL_NAMESPACE=") {
			out[i] = "TEMPORAL_NAMESPACE=" + ns
		}
	}
	return out
}

// withLedger is env with CAPSTAN_LEDGER_DSN set to dsn.
func withLedger(env []string, dsn string) []string {
	out := slices.Clone(env)
	for i, kv := range out {
		if strings.HasPrefix(kv, "CAPSTAN_LEDGER_DSN=") {
			out[i] = "CAPSTAN_LEDGER_DSN=" + dsn
		}
	}
	return out
}

// TestTwoNamespacesShareOneLedger (issue 14 item 3): two pools, one per
// namespace, share one PostgreSQL ledger and each run a task with the same
// id; both run fully. Before ledger keys were scoped to the namespace and
// execution chain, the second found the first's rows and did nothing.
func TestTwoNamespacesShareOneLedger(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewLedger(t)
	const other = "capstan-e2e-second"
	registerNamespace(t, other)
	sb := startSandbox(t)
	envA := withLedger(endpointEnv(t, "e2e-two-ns", sb), dsn)
	envB := withNamespace(envA, other)
	startWorker(t, envA)
	startWorker(t, envB)

	taskID := fmt.Sprintf("e2e-two-ns-%d", time.Now().UnixNano())
	a := runHello(t, envA, taskID, "Say hello to the team.")
	before := countEffects(sb)
	b := runHello(t, envB, taskID, "Say hello to the team.")
	after := countEffects(sb)
	t.Logf("after the task in namespace default: %s; after the same id in %s: %s", before, other, after)
	if got := after.ModelRequests - before.ModelRequests; got != 1 {
		t.Errorf("the task in %s made %d model requests, want 1: it must run as its own task", other, got)
	}
	if got := after.SlackMessages - before.SlackMessages; got != 1 {
		t.Errorf("the task in %s posted %d Slack messages, want 1", other, got)
	}
	if a.Deliveries[0].OperationID == b.Deliveries[0].OperationID {
		t.Errorf("both namespaces named their delivery %s", a.Deliveries[0].OperationID)
	}

	// gc asks each chain's own namespace: both tasks are still there, then
	// the one in the second namespace is deleted and only its rows go (its
	// items are all shared by content with the first task's).
	gc := runStarter(t, envA, "gc", "--older-than", "0s")
	t.Logf("starter gc --older-than 0s, both tasks retained:\n%s", gc.stdout)
	if gc.code != 0 || !strings.HasPrefix(gc.stdout, "deleted 0 task(s): 0 operation(s), 0 turn(s), 0 item(s), 0 bytes\nkept 2 of 2 ") {
		t.Fatalf("gc exited %d:\n%s%s\nwant nothing deleted, both tasks kept", gc.code, gc.stdout, gc.stderr)
	}
	deleteExecution(t, temporal, other, b.WorkflowID)
	gc = runStarter(t, envA, "gc", "--older-than", "0s")
	t.Logf("starter gc --older-than 0s, the task in %s deleted:\n%s", other, gc.stdout)
	if gc.code != 0 || !strings.HasPrefix(gc.stdout, "deleted 1 task(s): 1 operation(s), 1 turn(s), 0 item(s), ") ||
		!strings.Contains(gc.stdout, "kept 1 of 2 ") {
		t.Fatalf("gc exited %d:\n%s%s\nwant the deleted task's operation and turn gone, the other task kept", gc.code, gc.stdout, gc.stderr)
	}
}
