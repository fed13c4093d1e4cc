package activities_test

import (
	"context"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// A task writes only onto branches it created, as the ledger records them
// (default/own-branch): branches someone else made — a release branch,
// gh-pages, a colleague's branch under the prefix — are refused before
// anything is sent. A branch the task created counts once the ledger
// records it succeeded, here after a reconciliation found it (the answer
// to the create was lost), and from any later run of the task's chain (its
// operation ids carry the chain's scope, which continue-as-new keeps); a
// chain that reused the task id did not create it. --allow-branch
// (TaskPolicy.AllowBranches) names a branch the task may write onto.
func TestWritesGoOnlyOntoBranchesTheTaskCreated(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	ctx := context.Background()
	main, _, err := f.gh.Git.GetRef(ctx, "acme", "app", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"release/v2", "gh-pages", "capstan/colleague"} {
		if _, _, err := f.gh.Git.CreateRef(ctx, "acme", "app", &gogithub.Reference{Ref: gogithub.String("refs/heads/" + b), Object: main.Object}); err != nil {
			t.Fatal(err)
		}
	}
	const scope, otherScope = "~0123456789ab", "~ba9876543210"
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "d"}
	n := 0
	putFile := func(scope, branch string, tp *contract.TaskPolicy) contract.ExecuteToolResult {
		t.Helper()
		n++
		in := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", Scope: scope, TurnID: "T/" + scope + "/t9", ToolCallID: "call_put",
			OperationID: "d:T:" + scope + ":t9:github_put_file:" + string(rune('0'+n)), Tool: githubtools.NamePutFile,
			Arguments: f.args(t, `{"repo":"acme/app","branch":"`+branch+`","path":"a.md","content":"a `+branch+`\n","message":"m"}`), Policy: tp}
		return f.executeTool(t, in)
	}
	refused := func(what string, res contract.ExecuteToolResult) {
		t.Helper()
		if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != "default/own-branch" {
			t.Errorf("%s: %+v (decision %+v), want refused by default/own-branch", what, res, res.Decision)
		}
	}
	written := func(what string, res contract.ExecuteToolResult) {
		t.Helper()
		if res.State != capstan.OutcomeSucceeded || res.Decision == nil || res.Decision.Rule != "default/allow" {
			t.Errorf("%s: %+v (decision %+v), want written, allowed by default/allow", what, res, res.Decision)
		}
	}

	for _, b := range []string{"release/v2", "gh-pages", "capstan/colleague", "capstan/fix"} {
		refused("a write onto "+b+" before the task created any branch", putFile(scope, b, tp))
	}
	if s := f.sb.GitHub.Stats(); s.FilesWritten != 0 {
		t.Fatalf("files written = %d, want 0", s.FilesWritten)
	}

	// The task creates capstan/fix; the answer is lost, so the ledger
	// holds it UNKNOWN, which is not yet a branch the task created.
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "git/create-ref", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}
	create := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", Scope: scope, TurnID: "T/" + scope + "/t1", ToolCallID: "call_branch",
		OperationID: "d:T:" + scope + ":github_create_branch:branch:create:acme/app:capstan/fix", Tool: githubtools.NameCreateBranch,
		Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/fix","from":"main"}`), Policy: tp}
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, create)
	expectAppError(t, "a create whose answer was lost", err, contract.ErrTypeOperationUnknown)
	refused("a write onto capstan/fix while its creation is unknown", putFile(scope, "capstan/fix", tp))

	// The reconciler finds it: from then on the task created it, in every
	// run of its chain.
	res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", Scope: scope, OperationID: create.OperationID, ToolCallID: "call_branch",
		Since: time.Now(), Window: 5 * time.Second, Arguments: create.Arguments})
	if res.State != capstan.OutcomeSucceeded {
		t.Fatalf("Reconcile = %+v, want the branch found", res)
	}
	written("a write onto capstan/fix, found by the reconciler", putFile(scope, "capstan/fix", tp))
	refused("a write onto capstan/fix by a chain that reused the task id", putFile(otherScope, "capstan/fix", tp))
	refused("a write onto release/v2 after creating capstan/fix", putFile(scope, "release/v2", tp))

	allowing := *tp
	allowing.AllowBranches = []string{"gh-pages"}
	written("a write onto gh-pages with --allow-branch gh-pages", putFile(scope, "gh-pages", &allowing))
	if s := f.sb.GitHub.Stats(); s.FilesWritten != 2 {
		t.Errorf("files written = %d, want 2: onto capstan/fix and gh-pages", s.FilesWritten)
	}
}
