package reconcilers

import (
	"context"
	"fmt"
	"regexp"

	"github.com/google/go-github/v62/github"
)

// BranchQuery looks for the branch an operation created.
type BranchQuery struct {
	Repo   Repo
	Branch string
	// From is what the branch was created from: a branch name, or a full
	// commit SHA.
	From string
}

var commitSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

func branchQuery(t Target) (BranchQuery, error) {
	var a struct{ Repo, Branch, From string }
	if err := decodeArgs(t, &a); err != nil {
		return BranchQuery{}, err
	}
	if err := required(t.Kind, [2]string{"branch", a.Branch}, [2]string{"from", a.From}); err != nil {
		return BranchQuery{}, err
	}
	repo, err := parseRepo(t.Kind, a.Repo)
	if err != nil {
		return BranchQuery{}, err
	}
	return BranchQuery{Repo: repo, Branch: a.Branch, From: a.From}, nil
}

// Branch gets the branch's ref. Missing (404) is NotSeen. Present at the
// commit From names is Found ("refs/heads/<branch>@<sha>", as the tool
// records it). Present at another commit is Ambiguous: someone else created
// the branch, or it — or the From branch — moved since; a branch carries no
// mark of who made it, so nothing here can tell which.
func (g *GitHub) Branch(ctx context.Context, q BranchQuery) (Observation, error) {
	ref, err := g.getRef(ctx, q.Repo, q.Branch)
	switch {
	case notFound(err):
		return Observation{Outcome: NotSeen, Detail: fmt.Sprintf("branch %s does not exist in %s", q.Branch, q.Repo)}, nil
	case err != nil:
		return Observation{}, err
	}
	at := ref.GetObject().GetSHA()

	want, fromWhat := q.From, "commit "+q.From
	if !commitSHA.MatchString(q.From) {
		fromRef, err := g.getRef(ctx, q.Repo, q.From)
		switch {
		case notFound(err):
			return Observation{Outcome: Ambiguous, Detail: fmt.Sprintf(
				"branch %s exists in %s at %s, but the branch %s it was to be created from no longer exists, so nothing tells whether this operation made it",
				q.Branch, q.Repo, at, q.From)}, nil
		case err != nil:
			return Observation{}, err
		}
		want, fromWhat = fromRef.GetObject().GetSHA(), "branch "+q.From+" (now at "+fromRef.GetObject().GetSHA()+")"
	}
	if at != want {
		return Observation{Outcome: Ambiguous, Detail: fmt.Sprintf(
			"branch %s exists in %s at %s, not at %s: someone else created it, or a branch moved after it was created",
			q.Branch, q.Repo, at, fromWhat)}, nil
	}
	return Observation{Outcome: Found, ExternalID: "refs/heads/" + q.Branch + "@" + at,
		Detail: fmt.Sprintf("branch %s exists in %s at %s, as %s", q.Branch, q.Repo, at, fromWhat)}, nil
}

func (g *GitHub) getRef(ctx context.Context, repo Repo, branch string) (*github.Reference, error) {
	ref, _, err := g.c.Git.GetRef(ctx, repo.Owner, repo.Name, "heads/"+branch)
	if err != nil {
		return nil, fmt.Errorf("get branch %s of %s: %w", branch, repo, err)
	}
	return ref, nil
}
