package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestPersonFoundIsAppliedAfterReexecutionsAreSpent: a review comment's
// answer is lost three times, and the comment list lags so far behind
// that the reconciler never sees any of them: absent, executed again,
// twice, then a person is asked, with the ledger recording the operation
// ABSENT. The person answers `resolve --found URL`. Their answer is
// applied whatever the counters say: the operation is SUCCEEDED,
// recovered at that URL, nothing more is posted, and the task goes on to
// complete — it does not ask again.
func TestPersonFoundIsAppliedAfterReexecutionsAreSpent(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "issues/create-comment", Kind: sandbox.FaultDrop, Times: 3},
		{Endpoint: "issues/list-comments", Kind: sandbox.FaultLag, Lag: time.Hour},
		{Endpoint: "issues/list-comments-for-repo", Kind: sandbox.FaultLag, Lag: time.Hour},
	} {
		if err := sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	env := append(endpointEnv(t, "e2e-found-spent", sb), "CAPSTAN_RECONCILE_WINDOW=1s")
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-found-spent-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting, open a pull request and ask for review.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:review", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	opID := waitNeedsHuman(t, env, taskID)
	if !strings.Contains(opID, ":github_comment:") {
		t.Fatalf("the task waits for a person on %s, want the review comment", opID)
	}
	posted := sb.GitHub.Comments("capstan-sandbox/demo", 1)
	if len(posted) != 3 {
		t.Fatalf("comments posted = %d, want 3 (the first and two executions after an absent verdict)", len(posted))
	}
	asked := strings.Count(strings.Join(queryJournal(t, taskID), "\n"), "operation "+opID+" needs a person")
	if asked != 1 {
		t.Fatalf("the journal says %d times that %s needs a person, want once before the answer", asked, opID)
	}

	url := fmt.Sprintf("%s/capstan-sandbox/demo/pull/1#issuecomment-%d", strings.TrimRight(sb.GitHubURL, "/"), posted[0].ID)
	if r := runStarter(t, env, "resolve", taskID, opID, "--found", url); r.code != 0 {
		t.Fatalf("resolve --found: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// Either the task goes on and closes, or it asks again: wait for one.
	deadline := time.Now().Add(2 * time.Minute)
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		desc, err := describe(ctx, workflows.WorkflowID(taskID))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			break
		}
		if n := strings.Count(strings.Join(queryJournal(t, taskID), "\n"), "operation "+opID+" needs a person"); n > 1 {
			t.Fatalf("after resolve --found %s the task asks a person about %s again (%d times):\n%s",
				url, opID, n, strings.Join(queryJournal(t, taskID), "\n"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s neither ended nor asked again within 2 min of the answer", taskID)
		}
		<-poll.C // the journal is read by query: there is no event to wait on
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	for _, op := range res.Operations {
		if op.OperationID == opID && (op.State != capstan.OutcomeSucceeded || !op.Recovered || op.ExternalID != url) {
			t.Errorf("comment operation = %+v, want SUCCEEDED, recovered, at %s", op, url)
		}
	}
	if n := len(sb.GitHub.Comments("capstan-sandbox/demo", 1)); n != 3 {
		t.Errorf("comments posted = %d after the answer, want still 3", n)
	}
}
