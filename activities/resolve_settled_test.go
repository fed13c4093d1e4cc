package activities_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/sandbox"
)

// TestReconcileAppliesAPersonsFoundOverAnAbsentLedger: the reconciler
// recorded the pull request ABSENT (the workflow has no re-execution left
// and asks a person); the person's found is recorded all the same —
// SUCCEEDED at their URL, under a new fence, the model told — and nothing
// is sent.
func TestReconcileAppliesAPersonsFoundOverAnAbsentLedger(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	in, _ := f.unknownPR(t, sandbox.FaultFail)
	base := activities.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 50 * time.Millisecond, Arguments: in.Arguments}
	if res := f.reconcile(t, base); res.Verdict != capstan.VerdictAbsent {
		t.Fatalf("Reconcile = %+v, want absent", res)
	}
	absent := f.op(t, in.OperationID)

	const url = "https://github.com/acme/app/pull/7"
	person := base
	person.Resolution = &activities.Resolution{Verdict: capstan.VerdictFound, ExternalID: url}
	res := f.reconcile(t, person)
	if res.Verdict != capstan.VerdictFound || res.State != capstan.OutcomeSucceeded || res.ExternalID != url || res.Item == "" {
		t.Fatalf("Reconcile with a person's found over ABSENT = %+v, want found at %s with a tool message", res, url)
	}
	op := f.op(t, in.OperationID)
	if op.State != capstan.OutcomeSucceeded || op.ExternalID != url || op.Fence <= absent.Fence {
		t.Fatalf("ledger row %+v, want SUCCEEDED at %s under a fence past %d", op, url, absent.Fence)
	}
	if msg, _ := f.toolMessage(t, res.Item); msg.ToolCallID != "call_pr" {
		t.Errorf("tool message answers %q, want call_pr", msg.ToolCallID)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 0 {
		t.Errorf("pull requests created = %d, want 0: a person's verdict sends nothing", n)
	}
	// Asked again (a retried activity), the ledger's answer is the same.
	if again := f.reconcile(t, person); again.Verdict != capstan.VerdictFound || again.ExternalID != url {
		t.Errorf("Reconcile again = %+v, want found at %s", again, url)
	}
}
