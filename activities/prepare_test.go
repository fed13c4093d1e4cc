package activities_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// headOf is the commit the branch points at now.
func (f *reconcileFixture) headOf(t *testing.T, branch string) string {
	t.Helper()
	ref, _, err := f.gh.Git.GetRef(context.Background(), "acme", "app", "heads/"+branch)
	if err != nil {
		t.Fatal(err)
	}
	return ref.GetObject().GetSHA()
}

// expectHeadFact fails unless op's facts record head as the head SHA.
func expectHeadFact(t *testing.T, op ledger.Operation, head string) {
	t.Helper()
	var facts githubtools.PullRequestFacts
	if err := json.Unmarshal(op.Facts, &facts); err != nil || facts.HeadSHA != head {
		t.Fatalf("operation %s (%s) has facts %q, want head_sha %s", op.ID, op.State, op.Facts, head)
	}
}

// The pull request operation carries, in the ledger, the commit the head
// branch was at before the request was sent: when it succeeds, and when its
// answer is lost and only a reconciler can tell.
func TestExecuteToolRecordsThePullRequestHeadBeforeSending(t *testing.T) {
	t.Parallel()
	t.Run("succeeded", func(t *testing.T) {
		f := newReconcileFixture(t)
		f.prepareBranch(t)
		head := f.headOf(t, "feat")
		in := f.prInput(t)
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatal(err)
		}
		var out contract.ExecuteToolResult
		if err := v.Get(&out); err != nil || out.State != capstan.OutcomeSucceeded {
			t.Fatalf("ExecuteTool = %+v, %v; want SUCCEEDED", out, err)
		}
		op := f.op(t, in.OperationID)
		expectHeadFact(t, op, head)
		var result struct {
			HeadSHA string `json:"head_sha"`
		}
		if err := json.Unmarshal(op.Result, &result); err != nil || result.HeadSHA != head {
			t.Fatalf("the pull request opened at %q (%v), want at the recorded %s", result.HeadSHA, err, head)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		f := newReconcileFixture(t)
		in, _ := f.unknownPR(t, sandbox.FaultDrop)
		expectHeadFact(t, f.op(t, in.OperationID), f.headOf(t, "feat"))
	})
}

// Reading the head branch before sending fails: nothing was sent, so the
// claim is released (ABSENT, no attempt counted) and the call is a
// retryable not-sent error, after the wait a rate limit asked for; the
// retry records the head and sends once.
func TestExecuteToolWhosePrepareFailsIsNotSent(t *testing.T) {
	t.Parallel()
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "git/get-ref", Kind: sandbox.FaultFail, Status: 502, Times: 1},
		{Endpoint: "git/get-ref", Kind: sandbox.FaultSecondaryRateLimit, RetryAfter: 42 * time.Second, Times: 1},
	} {
		t.Run(string(rule.Kind), func(t *testing.T) {
			f := newReconcileFixture(t)
			f.prepareBranch(t)
			in := f.prInput(t)
			if err := f.sb.GitHub.AddFault(rule); err != nil {
				t.Fatal(err)
			}
			_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			appErr := expectAppError(t, "ExecuteTool", err, contract.ErrTypeOperationNotSent)
			if appErr.NonRetryable() || !strings.Contains(appErr.Error(), "reading what it needs recorded first failed") {
				t.Fatalf("%v, want a retryable error saying the read before sending failed", err)
			}
			if rule.Kind == sandbox.FaultSecondaryRateLimit && appErr.NextRetryDelay() != 42*time.Second {
				t.Errorf("next retry delay %s, want the 42s GitHub asked for", appErr.NextRetryDelay())
			}
			op := f.op(t, in.OperationID)
			if op.State != capstan.OutcomeAbsent || op.AttemptCount != 0 || op.LeaseOwner != "" || op.Facts != nil {
				t.Fatalf("ledger row %+v, want ABSENT, released, no attempt, no facts", op)
			}
			if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 0 {
				t.Fatalf("%d pull requests created, want none", n)
			}
			if rule.Kind == sandbox.FaultSecondaryRateLimit {
				return // go-github sends nothing more until the wait is over
			}

			v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			if err != nil {
				t.Fatal(err)
			}
			var out contract.ExecuteToolResult
			if err := v.Get(&out); err != nil || out.State != capstan.OutcomeSucceeded {
				t.Fatalf("the retry: %+v, %v; want SUCCEEDED", out, err)
			}
			op = f.op(t, in.OperationID)
			if op.AttemptCount != 1 {
				t.Errorf("attempts %d, want 1: the failed read sent nothing", op.AttemptCount)
			}
			expectHeadFact(t, op, f.headOf(t, "feat"))
			if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
				t.Errorf("pull requests created = %d, want 1", n)
			}
		})
	}
}

// The reconciler reads the head recorded before sending: the pull request
// it opened is found after the branch moved on, and one whose marker was
// edited out is left to a person rather than called absent.
func TestReconcileMatchesTheRecordedHead(t *testing.T) {
	t.Parallel()
	t.Run("branch moved", func(t *testing.T) {
		f := newReconcileFixture(t)
		in, _ := f.unknownPR(t, sandbox.FaultDrop)
		recorded := f.headOf(t, "feat")
		if _, _, err := f.gh.Repositories.CreateFile(context.Background(), "acme", "app", "more.md", &github.RepositoryContentFileOptions{
			Message: github.String("more"), Content: []byte("more\n"), Branch: github.String("feat")}); err != nil {
			t.Fatal(err)
		}
		res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
			Since: time.Now(), Window: 5 * time.Second, Arguments: in.Arguments})
		if url := f.prURL(t, 1); res.Verdict != capstan.VerdictFound || res.ExternalID != url ||
			!strings.Contains(res.Reason, recorded) || !strings.Contains(res.Reason, f.headOf(t, "feat")) {
			t.Fatalf("Reconcile = %+v, want found %s, saying the head moved from %s", res, url, recorded)
		}
	})
	t.Run("marker edited out", func(t *testing.T) {
		f := newReconcileFixture(t)
		in, _ := f.unknownPR(t, sandbox.FaultDrop)
		if _, _, err := f.gh.PullRequests.Edit(context.Background(), "acme", "app", 1,
			&github.PullRequest{Body: github.String("Fixes it.")}); err != nil {
			t.Fatal(err)
		}
		res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
			Since: time.Now(), Window: 300 * time.Millisecond, Arguments: in.Arguments})
		if res.Verdict != capstan.VerdictIndeterminate || res.State != capstan.OutcomeNeedsHuman ||
			!strings.Contains(res.Reason, "#1") || !strings.Contains(res.Reason, f.headOf(t, "feat")) {
			t.Fatalf("Reconcile = %+v, want indeterminate naming #1 and the recorded head", res)
		}
		if op := f.op(t, in.OperationID); op.State != capstan.OutcomeNeedsHuman {
			t.Fatalf("ledger row %+v, want NEEDS_HUMAN", op)
		}
		if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
			t.Errorf("pull requests created = %d, want 1", n)
		}
	})
}
