package reconcilers

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// PullRequestQuery looks for the pull request an operation opened.
type PullRequestQuery struct {
	Repo        Repo
	Head, Base  string // branch names; the head is in Repo
	OperationID string
}

func pullRequestQuery(t Target) (PullRequestQuery, error) {
	var a struct{ Repo, Head, Base string }
	if err := decodeArgs(t, &a); err != nil {
		return PullRequestQuery{}, err
	}
	if err := required(t.Kind, [2]string{"head", a.Head}, [2]string{"base", a.Base}); err != nil {
		return PullRequestQuery{}, err
	}
	repo, err := parseRepo(t.Kind, a.Repo)
	if err != nil {
		return PullRequestQuery{}, err
	}
	return PullRequestQuery{Repo: repo, Head: a.Head, Base: a.Base, OperationID: t.OperationID}, nil
}

// PullRequest lists the pull requests of q's head and base in every state
// and picks those whose body carries the operation's marker: one is Found
// (its URL), several are Ambiguous, none is NotSeen. A pull request for the
// same branches without the marker is someone else's and does not count.
func (g *GitHub) PullRequest(ctx context.Context, q PullRequestQuery) (Observation, error) {
	marker := githubtools.Marker(q.OperationID)
	opts := &github.PullRequestListOptions{State: "all", Head: q.Repo.Owner + ":" + q.Head, Base: q.Base,
		ListOptions: github.ListOptions{PerPage: perPage}}
	what := fmt.Sprintf("pull requests of %s from %s into %s", q.Repo, opts.Head, q.Base)
	listed := 0
	var matches []*github.PullRequest
	for page := 1; ; page++ {
		prs, resp, err := g.c.PullRequests.List(ctx, q.Repo.Owner, q.Repo.Name, opts)
		if err != nil {
			return Observation{}, fmt.Errorf("list %s: %w", what, err)
		}
		listed += len(prs)
		for _, pr := range prs {
			if strings.Contains(pr.GetBody(), marker) {
				matches = append(matches, pr)
			}
		}
		if resp.NextPage == 0 {
			break
		}
		if page == maxPages {
			return Observation{}, fmt.Errorf("list %s: more than %d pages", what, maxPages)
		}
		opts.Page = resp.NextPage
	}
	switch len(matches) {
	case 0:
		return Observation{Outcome: NotSeen,
			Detail: fmt.Sprintf("none of the %d %s carries the operation's marker", listed, what)}, nil
	case 1:
		pr := matches[0]
		return Observation{Outcome: Found, ExternalID: pr.GetHTMLURL(),
			Detail: fmt.Sprintf("pull request #%d (%s) of the %d %s carries the operation's marker", pr.GetNumber(), pr.GetState(), listed, what)}, nil
	default:
		nums := make([]string, len(matches))
		for i, pr := range matches {
			nums[i] = fmt.Sprintf("#%d", pr.GetNumber())
		}
		return Observation{Outcome: Ambiguous,
			Detail: fmt.Sprintf("%d %s carry the operation's marker: %s", len(matches), what, strings.Join(nums, ", "))}, nil
	}
}
