package e2e

import (
	"context"
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
	"github.com/capstanhq/capstan/workflows"
)

// runHello runs the one-turn hello task under id in env's namespace and
// checks that it completed with its Slack delivery acknowledged.
func runHello(t *testing.T, env []string, id string) workflows.TaskResult {
	t.Helper()
	r := runStarter(t, env, "run", "--prompt", "Say hello to the team.", "--model", "openai:hello",
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

// deleteExecution deletes the task's workflow from the dev server, as
// retention does, and waits until the server no longer knows it.
func deleteExecution(t *testing.T, c client.Client, namespace, workflowID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
		Namespace: namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflowID},
	}); err != nil {
		t.Fatalf("delete workflow %s: %v", workflowID, err)
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		_, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflow %s still described a minute after its deletion (last answer: %v)", workflowID, err)
		case <-poll.C: // deletion is asynchronous and announces nothing: poll it
		}
	}
}

// TestReusedTaskIDRunsAsNewTask (issue 14 item 3): a task started with the
// id of one whose history Temporal no longer has — deleted here, as
// retention deletes it — runs as a new task. Before ledger keys were scoped
// to the execution chain, it found the old task's committed turn and
// acknowledged delivery in the ledger and "completed" without calling the
// model or posting anything.
func TestReusedTaskIDRunsAsNewTask(t *testing.T) {
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-reuse", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-reuse-%d", time.Now().UnixNano())
	first := runHello(t, env, taskID)
	before := countEffects(sb)
	t.Logf("after the first task: %s", before)

	deleteExecution(t, temporal, "default", first.WorkflowID)
	second := runHello(t, env, taskID)
	after := countEffects(sb)
	t.Logf("after the second task with the same id: %s; its delivery %s", after, second.Deliveries[0].OperationID)
	if got := after.ModelRequests - before.ModelRequests; got != 1 {
		t.Errorf("the second task made %d model requests, want 1: it must run as a new task", got)
	}
	if got := after.SlackMessages - before.SlackMessages; got != 1 {
		t.Errorf("the second task posted %d Slack messages, want 1", got)
	}
	if second.Deliveries[0].OperationID == first.Deliveries[0].OperationID {
		t.Errorf("both tasks named their delivery %s; a reused id must get ledger keys of its own", first.Deliveries[0].OperationID)
	}
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
	dsn := pgtest.NewLedger(t)
	const other = "capstan-e2e-second"
	registerNamespace(t, other)
	sb := startSandbox(t)
	envA := withLedger(endpointEnv(t, "e2e-two-ns", sb), dsn)
	envB := withNamespace(envA, other)
	startWorker(t, envA)
	startWorker(t, envB)

	taskID := fmt.Sprintf("e2e-two-ns-%d", time.Now().UnixNano())
	a := runHello(t, envA, taskID)
	before := countEffects(sb)
	b := runHello(t, envB, taskID)
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
}
