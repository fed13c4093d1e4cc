package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
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
		f.executeSucceeded(t, "ExecuteTool", in)
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

// Reading the head branch before sending fails: nothing was sent. On the
// operation's first attempt nothing was claimed either (the facts are read
// before the claim), so the ledger has no row; on an operation it already
// holds, released by an earlier attempt, the claim taken for the read is
// released again (ABSENT, no attempt counted). Either way the call is a
// retryable not-sent error, after the wait a rate limit asked for, and the
// retry records the head and sends once.
func TestExecuteToolWhosePrepareFailsIsNotSent(t *testing.T) {
	t.Parallel()
	for _, seen := range []bool{false, true} {
		for _, rule := range []sandbox.FaultRule{
			{Endpoint: "git/get-ref", Kind: sandbox.FaultFail, Status: 502, Times: 1},
			{Endpoint: "git/get-ref", Kind: sandbox.FaultSecondaryRateLimit, RetryAfter: 42 * time.Second, Times: 1},
		} {
			t.Run(fmt.Sprintf("%s/seen=%v", rule.Kind, seen), func(t *testing.T) {
				f := newReconcileFixture(t)
				f.prepareBranch(t)
				in := f.prInput(t)
				if seen {
					f.releasedEarlier(t, in, prArgs)
				}
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
				if seen {
					op := f.op(t, in.OperationID)
					if op.State != capstan.OutcomeAbsent || op.AttemptCount != 0 || op.LeaseOwner != "" || op.Facts != nil {
						t.Fatalf("ledger row %+v, want ABSENT, released, no attempt, no facts", op)
					}
				} else if op, err := f.ledger.Get(context.Background(), in.OperationID); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("ledger row %+v (%v), want none: nothing was claimed", op, err)
				}
				if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 0 {
					t.Fatalf("%d pull requests created, want none", n)
				}
				if rule.Kind == sandbox.FaultSecondaryRateLimit {
					return // go-github sends nothing more until the wait is over
				}

				f.executeSucceeded(t, "the retry", in)
				op := f.op(t, in.OperationID)
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
}

// executeSucceeded runs ExecuteTool on in and wants it SUCCEEDED.
func (f *reconcileFixture) executeSucceeded(t *testing.T, what string, in contract.ExecuteToolInput) contract.ExecuteToolResult {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var out contract.ExecuteToolResult
	if err := v.Get(&out); err != nil || out.State != capstan.OutcomeSucceeded {
		t.Fatalf("%s = %+v, %v; want SUCCEEDED", what, out, err)
	}
	return out
}

// releasedEarlier records in's operation as an earlier attempt that claimed
// it and sent nothing would have left it: ABSENT, released.
func (f *reconcileFixture) releasedEarlier(t *testing.T, in contract.ExecuteToolInput, args string) {
	t.Helper()
	ctx := context.Background()
	impl, err := f.acts.Tools.Get(in.Tool)
	if err != nil {
		t.Fatal(err)
	}
	id, err := impl.Identify(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	op := ledger.Operation{ID: in.OperationID, Tenant: in.Tenant, TaskID: in.TaskID, TurnID: in.TurnID, ToolCallID: in.ToolCallID,
		Kind: in.Tool, BusinessKey: id.BusinessKey, RequestHash: activities.RequestHash(in.Tool, id.Effect)}
	claim, err := f.ledger.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: "earlier-worker#1", Lease: time.Minute})
	if err != nil || claim.Status != ledger.Claimed {
		t.Fatalf("claim as an earlier attempt: %q, %v", claim.Status, err)
	}
	if err := f.ledger.Release(ctx, op.ID, claim.Op.Fence); err != nil {
		t.Fatal(err)
	}
	if got := f.op(t, op.ID); got.State != capstan.OutcomeAbsent {
		t.Fatalf("the earlier attempt left %s, want ABSENT", got.State)
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

// A tool that reads facts before sending pays one ledger write before the
// request on an operation's first attempt: the claim, straight into
// RUNNING with the facts. On an operation the ledger already holds it
// claims, reads under the claim, and marks it RUNNING with the facts, as
// before; the facts recorded are the same either way.
func TestExecuteToolPreparesWithOneWriteBeforeSending(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		seen bool
		want []string
	}{
		{false, []string{"Claim(running=true, facts=true)", "Complete(succeeded)"}},
		{true, []string{"Claim(running=false, facts=false)", "MarkRunning(facts=true)", "Complete(succeeded)"}},
	} {
		t.Run(fmt.Sprintf("seen=%v", tc.seen), func(t *testing.T) {
			wl := &writeLog{}
			f := newReconcileFixture(t, func(d *activities.Deps) { wl.Ledger = d.Ledger; d.Ledger = wl })
			f.prepareBranch(t)
			in := f.prInput(t)
			if tc.seen {
				f.releasedEarlier(t, in, prArgs)
			}
			wl.sequence() // prepareBranch's own operations
			f.executeSucceeded(t, "ExecuteTool", in)
			if got := wl.sequence(); !slices.Equal(got, tc.want) {
				t.Errorf("ledger writes %q, want %q", got, tc.want)
			}
			op := f.op(t, in.OperationID)
			expectHeadFact(t, op, f.headOf(t, "feat"))
			if op.AttemptCount != 1 {
				t.Errorf("attempts %d, want 1", op.AttemptCount)
			}
		})
	}
}
