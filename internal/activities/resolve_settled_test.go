package activities_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
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
	base := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 50 * time.Millisecond, Arguments: in.Arguments}
	if res := f.reconcile(t, base); res.Verdict != capstan.VerdictAbsent {
		t.Fatalf("Reconcile = %+v, want absent", res)
	}
	absent := f.op(t, in.OperationID)

	// The pull request the person found: opened by hand, say.
	pr, _, err := f.gh.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
		Title: github.String("by hand"), Head: github.String("feat"), Base: github.String("main")})
	if err != nil {
		t.Fatal(err)
	}
	url := pr.GetHTMLURL()
	person := base
	person.Resolution = &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: url, ResolvedBy: "alice"}

	// A URL that is not the operation's effect, or one that cannot be
	// read back, is refused and changes nothing.
	for _, tc := range []struct{ url, want string }{
		{f.sb.GitHubURL + "/acme/app/pull/999", "acme/app has no pull request #999"},
		{f.sb.GitHubURL + "/acme/other/pull/1", "is not in acme/app"},
		{f.sb.GitHubURL + "/acme/app/issues/1#issuecomment-3", "is not a pull request URL"},
		{url, "could not read"}, // pulls/get fails
	} {
		if strings.Contains(tc.want, "could not") {
			if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/get", Kind: sandbox.FaultFail, Times: 1}); err != nil {
				t.Fatal(err)
			}
		}
		wrong := base
		wrong.Resolution = &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: tc.url, ResolvedBy: "bob"}
		res := f.reconcile(t, wrong)
		if res.Verdict != capstan.VerdictIndeterminate || !strings.Contains(res.Reason, tc.want) {
			t.Errorf("Reconcile with found %s = %+v, want indeterminate saying %q", tc.url, res, tc.want)
		}
		if op := f.op(t, in.OperationID); op.State != absent.State || op.Fence != absent.Fence {
			t.Errorf("after the refused %s the ledger row is %+v, want it unchanged from %+v", tc.url, op, absent)
		}
	}

	created := f.sb.GitHub.Stats().PullRequestsCreated
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
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != created {
		t.Errorf("pull requests created = %d, want %d: a person's verdict sends nothing", n, created)
	}
	if !strings.Contains(op.Error+string(op.Result), "alice") {
		t.Errorf("ledger row %+v does not record who resolved it (alice)", op)
	}
	// Asked again (a retried activity), the ledger's answer is the same.
	if again := f.reconcile(t, person); again.Verdict != capstan.VerdictFound || again.ExternalID != url {
		t.Errorf("Reconcile again = %+v, want found at %s", again, url)
	}
}
