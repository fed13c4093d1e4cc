package github_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// github_create_branch starts a branch only from a branch of the
// repository or a commit one reaches (issue 32, item 12): a commit no
// branch reaches — as a fork's pull request leaves in the repository — or
// a "from" that names nothing is refused with one sentence, and no branch
// is created. A branch name, a branch's head, an older commit of the
// default branch and a commit only another branch reaches pass.
func TestCreateBranchStartsOnlyFromABranch(t *testing.T) {
	t.Parallel()
	gh := sandbox.NewGitHub()
	srv := httptest.NewServer(gh)
	t.Cleanup(srv.Close)
	c, err := githubtools.NewClient(srv.URL, "test-token", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{gh: gh, tools: tool.NewRegistry(githubtools.Tools(c)...)}
	ctx := context.Background()
	head := func(branch string) string {
		t.Helper()
		ref, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/"+branch)
		if err != nil {
			t.Fatal(err)
		}
		return ref.GetObject().GetSHA()
	}
	put := func(branch, path string) {
		t.Helper()
		f.mustRun(t, "github_put_file", "op-put-"+branch+path, `{"repo":"acme/app","branch":"`+branch+`","path":"`+path+`","content":"x\n","message":"m"}`)
	}

	olderOnMain := head("main")
	put("main", "b.md")
	mainHead := head("main")
	if _, _, err := c.Git.CreateRef(ctx, "acme", "app", &gogithub.Reference{Ref: gogithub.String("refs/heads/release/v2"),
		Object: &gogithub.GitObject{SHA: gogithub.String(mainHead)}}); err != nil {
		t.Fatal(err)
	}
	put("release/v2", "VERSION")
	onlyOnRelease := head("release/v2")
	put("release/v2", "CHANGELOG.md")
	fromFork := gh.AddUnreachableCommit("acme/app", map[string]string{".github/workflows/ci.yml": "on: push\n"})

	n := 0
	create := func(from string) (string, error) {
		t.Helper()
		n++
		branch := "capstan/b" + string(rune('a'+n))
		_, _, err := f.run(t, "github_create_branch", "op-"+branch, `{"repo":"acme/app","branch":"`+branch+`","from":"`+from+`"}`)
		return branch, err
	}
	for _, tc := range []struct{ what, from string }{
		{"a branch name", "main"},
		{"another branch's name", "release/v2"},
		{"the default branch's head", mainHead},
		{"an older commit of the default branch", olderOnMain},
		{"a commit only release/v2 reaches", onlyOnRelease},
	} {
		branch, err := create(tc.from)
		if err != nil {
			t.Errorf("from %s (%s): %v, want the branch created", tc.what, tc.from, err)
			continue
		}
		if got := head(branch); tc.from != "main" && tc.from != "release/v2" && got != tc.from {
			t.Errorf("from %s: branch %s at %s, want %s", tc.what, branch, got, tc.from)
		}
	}

	created := gh.Stats().BranchesCreated
	for _, tc := range []struct{ what, from, says string }{
		{"a commit no branch reaches", fromFork, "commit " + fromFork + " is not on a branch of acme/app"},
		{"a commit the repository does not hold", strings.Repeat("0123456789", 4), "does not exist in acme/app"},
		{"a branch that does not exist", "fork/feature", "branch fork/feature does not exist in acme/app"},
	} {
		branch, err := create(tc.from)
		switch {
		case err == nil:
			t.Errorf("from %s: branch %s created, want refused", tc.what, branch)
			continue
		case !errors.Is(err, tool.ErrRefused) || githubtools.Classify(err) != tool.VerdictFailed:
			t.Errorf("from %s: %v (verdict %s), want refused, failed", tc.what, err, githubtools.Classify(err))
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.says) || !strings.HasSuffix(msg, "start the branch from a branch, or from a commit of one") ||
			strings.ContainsAny(msg, "\n") || strings.Contains(msg, ". ") {
			t.Errorf("from %s: %q, want one sentence saying %q", tc.what, msg, tc.says)
		}
		if _, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/"+branch); githubtools.HTTPStatus(err) != 404 {
			t.Errorf("from %s: branch %s exists (%v), want none", tc.what, branch, err)
		}
	}
	if got := gh.Stats().BranchesCreated; got != created {
		t.Errorf("branches created = %d after the refusals, want %d", got, created)
	}
}
