package github_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// A default branch read from GitHub is believed for 10 minutes, then read
// again: a repository whose default branch changed is guarded on the new
// one within config.DefaultBranchTTL, in a worker that keeps running.
func TestDefaultBranchIsReadAgainAfterTenMinutes(t *testing.T) {
	t.Parallel()
	g := sandbox.NewGitHub()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	c, err := githubtools.NewClient(srv.URL+"/", "test-token", http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	branches := githubtools.NewRepoBranches(c)
	branches.Now = func() time.Time { return now }
	ctx := context.Background()
	read := func(when string, want string) {
		t.Helper()
		if got, err := branches.DefaultBranch(ctx, "acme/app"); err != nil || got != want {
			t.Fatalf("%s: default branch %q, %v; want %q", when, got, err, want)
		}
	}

	g.SetDefaultBranch("acme/app", "main")
	read("first read", "main")
	g.SetDefaultBranch("acme/app", "trunk")
	now = now.Add(10*time.Minute - time.Second)
	read("9m59s later (kept)", "main")
	now = now.Add(time.Second)
	read("10 minutes later", "trunk")
}
