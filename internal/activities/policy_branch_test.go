package activities_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// lazyBranches lets a test give the fixture a reader over the fixture's own
// sandbox, built after it.
type lazyBranches struct {
	r activities.BranchReader
}

func (l *lazyBranches) DefaultBranch(ctx context.Context, repo string) (string, error) {
	return l.r.DefaultBranch(ctx, repo)
}

// A task based on main in a repository whose default branch is trunk never
// writes to trunk either: the worker reads the default branch through
// go-github (GET /repos/{owner}/{repo}) before deciding a write, once per
// repository, and default/base-branch refuses the write, sending nothing.
// A read of trunk is allowed and needs no lookup.
func TestWriteToTheRepositorysDefaultBranchIsRefused(t *testing.T) {
	t.Parallel()
	lazy := &lazyBranches{}
	f := newFixture(t, func(d *activities.Deps) { d.DefaultBranches = lazy })
	gh, err := githubtools.NewClient(f.sb.GitHubURL, "test-token", http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	lazy.r = githubtools.NewRepoBranches(gh)
	f.sb.GitHub.SetDefaultBranch("acme/app", "trunk")
	before := f.sb.GitHub.Stats()
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main"}
	for i, tc := range []struct{ impl, args, rule, says string }{
		{githubtools.NamePutFile, `{"repo":"acme/app","branch":"trunk","path":"a.md","content":"c","message":"m"}`, "default/base-branch",
			"trunk is the default branch of acme/app, which this task never writes to"},
		{githubtools.NamePutFile, `{"repo":"Acme/App","branch":"main","path":"a.md","content":"c","message":"m"}`, "default/base-branch",
			"main is this task's base branch"},
		{githubtools.NameGetFile, `{"repo":"acme/app","path":"README.md","ref":"trunk"}`, "default/read", ""},
	} {
		in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: "T/t1", ToolCallID: "call", OperationID: "op-" + string(rune('a'+i)),
			Tool: tc.impl, Arguments: f.args(t, tc.args), Policy: tp}
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		if res.Decision == nil || res.Decision.Rule != tc.rule || !strings.Contains(res.Decision.Reason, tc.says) ||
			(tc.says == "") != (res.State == capstan.OutcomeSucceeded) {
			t.Errorf("%d %s: %+v (decision %+v), want decided by %s saying %q", i, tc.impl, res, res.Decision, tc.rule, tc.says)
		}
	}
	after := f.sb.GitHub.Stats()
	if after.FilesWritten != before.FilesWritten {
		t.Errorf("files written went from %d to %d, want no write", before.FilesWritten, after.FilesWritten)
	}
	// One repository lookup (cached for the second write) and the read.
	if n := after.Requests - before.Requests; n != 2 {
		t.Errorf("GitHub handled %d requests, want 2: one default-branch lookup and the read", n)
	}
}
