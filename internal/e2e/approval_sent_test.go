package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestWhatWasSentStaysSent: a pull request a person approved and capstan
// sent is never asked for again, never denied, and never called "not
// sent", whatever a reset brings back. After the task completed with it
// sent:
//
//  1. reset to the first workflow task: the whole task runs again, and
//     the pull request's ExecuteTool, deciding require_approval, finds the
//     ledger holds it succeeded and answers it replayed: nobody is asked;
//  2. reset to the moment the task waited for the answer (after its Slack
//     notice), with no update reapplied: the task waits again, and a
//     person's deny is answered from the ledger: the operation succeeded,
//     replayed, not denied (its tool message is the replayed result, not
//     "Nothing was sent");
//  3. the same reset, then the task cancelled while it waits: the
//     operation is recorded as the ledger holds it, succeeded, not "not
//     sent".
//
// One pull request reaches GitHub throughout.
func TestWhatWasSentStaysSent(t *testing.T) {
	t.Parallel()
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-approval-sent", sb)
	startWorker(t, env)
	taskID, op := startApprovalTask(t, env, "approval-sent", "--slack", "#approvals")
	if op.CallHash == "" {
		t.Fatalf("the operation awaiting approval has no call hash: %+v", op)
	}
	if r := runStarter(t, env, "approve", taskID, op.OperationID, "--hash", op.CallHash, "--as", "alice"); r.code != 0 {
		t.Fatalf("approve: exit %d, stderr %q", r.code, r.stderr)
	}
	orig := waitResult(t, taskID)
	if orig.Status != workflows.StatusCompleted || sb.GitHub.Stats().PullRequestsCreated != 1 {
		t.Fatalf("task %s ended %s with %d pull requests; want completed with 1", taskID, orig.Status, sb.GitHub.Stats().PullRequestsCreated)
	}
	wid := workflows.WorkflowID(taskID)
	origRun := currentRunID(t, wid)

	// (1) The whole task again: the pull request is replayed, nobody asked.
	run1 := resetTask(t, cli, wid, origRun, "--type", "FirstWorkflowTask")
	res1 := waitRunNotAsking(t, env, taskID, wid, run1)
	if got := opByID(res1, op.OperationID); res1.Status != workflows.StatusCompleted || got == nil ||
		got.State != capstan.OutcomeSucceeded || !got.Replayed || got.Approval != nil {
		t.Errorf("reset to the first workflow task: status %s, pull request %+v; want completed, the pull request replayed, nobody asked", res1.Status, got)
	}
	recordRunHistory(t, temporal, "approval-reset-replayed", wid, run1)

	// (2) Back to the question, and a person denies: the ledger answers.
	waiting := eventAfterFirst(t, wid, origRun, "Deliver")
	resetTask(t, cli, wid, origRun, "--event-id", strconv.FormatInt(waiting, 10), "--reapply-exclude", "All")
	again := waitAwaitingApproval(t, env, taskID)
	if r := runStarter(t, env, "deny", taskID, again.OperationID, "--reason", "changed my mind", "--as", "bob"); r.code != 0 {
		t.Fatalf("deny: exit %d, stderr %q", r.code, r.stderr)
	}
	res2 := waitResult(t, taskID)
	if got := opByID(res2, op.OperationID); got == nil || got.State != capstan.OutcomeSucceeded || !got.Replayed || strings.Contains(got.Reason, "denied") {
		t.Errorf("denied after a reset: pull request %+v; want succeeded, replayed from the ledger, not denied", got)
	}

	// (3) Back to the question, and the task is cancelled while it waits.
	run3 := resetTask(t, cli, wid, origRun, "--event-id", strconv.FormatInt(waiting, 10), "--reapply-exclude", "All")
	waitAwaitingApproval(t, env, taskID)
	if r := runStarter(t, env, "cancel", taskID); r.code != 0 {
		t.Fatalf("cancel: exit %d, stderr %q", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = temporal.GetWorkflow(ctx, wid, "").Get(ctx, nil) // cancelled: its error is expected
	res3 := decodeResult(t, runStarter(t, env, "status", taskID, "--json"))
	if got := opByID(res3, op.OperationID); res3.Status != workflows.StatusCancelled || got == nil ||
		got.State != capstan.OutcomeSucceeded || strings.Contains(got.Reason, "not sent") {
		t.Errorf("cancelled while waiting after a reset: status %s, pull request %+v; want cancelled, the pull request succeeded as the ledger holds it", res3.Status, got)
	}
	recordRunHistory(t, temporal, "approval-reset-cancelled", wid, run3)
	if n := sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want exactly 1", n)
	}
}

// waitRunNotAsking waits for run runID of workflow wid to close and
// returns its result, failing at once if it waits for an approval.
func waitRunNotAsking(t *testing.T, env []string, taskID, wid, runID string) workflows.TaskResult {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	poll := time.NewTicker(300 * time.Millisecond)
	defer poll.Stop()
	for {
		desc, err := describe(context.Background(), wid)
		if err != nil {
			t.Fatal(err)
		}
		if desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return waitRun(t, wid, runID)
		}
		for _, o := range decodeResult(t, runStarter(t, env, "status", taskID, "--json")).Operations {
			if o.State == capstan.OutcomeAwaitingApproval {
				t.Fatalf("run %s asks again for the approval of %s (%s), which was sent", runID, o.OperationID, o.Summary)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s of %s did not end", runID, wid)
		}
		<-poll.C // the status is a query: there is no event to wait on
	}
}

// eventAfterFirst is the WorkflowTaskCompleted event that follows the
// completion of the run's first activity of type typ.
func eventAfterFirst(t *testing.T, wid, runID, typ string) int64 {
	t.Helper()
	scheduled, done := int64(0), false
	for _, ev := range fetchRunHistory(t, temporal, wid, runID).GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && scheduled == 0 && a.GetActivityType().GetName() == typ {
			scheduled = ev.GetEventId()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && scheduled != 0 && a.GetScheduledEventId() == scheduled {
			done = true
		}
		if done && ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return ev.GetEventId()
		}
	}
	t.Fatalf("run %s has no workflow task completed after its first %s", runID, typ)
	return 0
}

// opByID is the operation id of res, or nil.
func opByID(res workflows.TaskResult, id string) *workflows.OperationRecord {
	for i := range res.Operations {
		if res.Operations[i].OperationID == id {
			return &res.Operations[i]
		}
	}
	return nil
}
