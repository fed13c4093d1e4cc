package sandbox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

// The pull requests GitHub refuses, and how go-github reads the refusal.

// wantValidation checks a 422 the way GitHub writes it and go-github reads
// it: "Validation Failed" with one custom error carrying the sentence.
func wantValidation(t *testing.T, err error, msg string) {
	t.Helper()
	var er *github.ErrorResponse
	if !errors.As(err, &er) {
		t.Fatalf("err = %v, want an ErrorResponse", err)
	}
	if er.Response.StatusCode != http.StatusUnprocessableEntity || er.Message != "Validation Failed" || len(er.Errors) != 1 ||
		er.Errors[0].Resource != "PullRequest" || er.Errors[0].Code != "custom" || er.Errors[0].Message != msg {
		t.Fatalf("got %d %q %+v, want 422 Validation Failed with the custom error %q", er.Response.StatusCode, er.Message, er.Errors, msg)
	}
}

func TestGitHubRefusesPullRequestWithoutCommits(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	create := func(head string) error {
		_, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
			Title: github.String("t"), Head: &head, Base: github.String("main")})
		return err
	}
	createBranch(t, c, "app", "even")
	wantValidation(t, create("even"), "No commits between main and even")
	wantValidation(t, create("acme:even"), "No commits between main and acme:even")

	// A branch main has moved past has nothing to merge either.
	createBranch(t, c, "app", "behind")
	commitFile(t, c, "app", "main", "later.txt")
	wantValidation(t, create("behind"), "No commits between main and behind")

	// One commit on the branch is enough.
	commitFile(t, c, "app", "even", "even.txt")
	if err := create("even"); err != nil {
		t.Fatalf("with a commit ahead: %v", err)
	}
	if s := g.Stats(); s.PullRequestsCreated != 1 {
		t.Errorf("PullRequestsCreated = %d, want 1", s.PullRequestsCreated)
	}
}

func TestGitHubRefusesSecondOpenPullRequest(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	createBranchAhead(t, c, "app", "feature")
	create := func(head, base string) error {
		_, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
			Title: github.String("t"), Head: &head, Base: &base})
		return err
	}
	if err := create("feature", "main"); err != nil {
		t.Fatal(err)
	}
	wantValidation(t, create("feature", "main"), "A pull request already exists for acme:feature.")
	wantValidation(t, create("acme:feature", "main"), "A pull request already exists for acme:feature.")
	if s := g.Stats(); s.PullRequestsCreated != 1 || len(g.PullRequests("acme/app")) != 1 {
		t.Errorf("stats = %+v, pull requests %+v; want one", s, g.PullRequests("acme/app"))
	}
}
