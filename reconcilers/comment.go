package reconcilers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// CommentQuery looks for the comment an operation posted on an issue or a
// pull request.
type CommentQuery struct {
	Repo        Repo
	Number      int // issue or pull request number
	OperationID string
	Since       time.Time // when the operation was claimed
}

func commentQuery(t Target) (CommentQuery, error) {
	var a struct {
		Repo   string
		Number int
	}
	if err := decodeArgs(t, &a); err != nil {
		return CommentQuery{}, err
	}
	if a.Number < 1 {
		return CommentQuery{}, fmt.Errorf("%s: %w: issue number %d", t.Kind, ErrBadTarget, a.Number)
	}
	repo, err := parseRepo(t.Kind, a.Repo)
	if err != nil {
		return CommentQuery{}, err
	}
	return CommentQuery{Repo: repo, Number: a.Number, OperationID: t.OperationID, Since: t.Since}, nil
}

// Comment lists the comments of the issue updated since the claim, minus
// ClockMargin, and picks those whose body carries the operation's marker:
// one is Found (its URL), several are Ambiguous, none is NotSeen.
func (g *GitHub) Comment(ctx context.Context, q CommentQuery) (Observation, error) {
	marker := githubtools.Marker(q.OperationID)
	since := q.Since.Add(-ClockMargin).UTC().Truncate(time.Second)
	opts := &github.IssueListCommentsOptions{Since: &since, ListOptions: github.ListOptions{PerPage: perPage}}
	what := fmt.Sprintf("comments on %s#%d since %s", q.Repo, q.Number, since.Format(time.RFC3339))
	listed := 0
	var matches []*github.IssueComment
	for page := 1; ; page++ {
		cs, resp, err := g.c.Issues.ListComments(ctx, q.Repo.Owner, q.Repo.Name, q.Number, opts)
		if err != nil {
			return Observation{}, fmt.Errorf("list %s: %w", what, err)
		}
		listed += len(cs)
		for _, c := range cs {
			if strings.Contains(c.GetBody(), marker) {
				matches = append(matches, c)
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
		return Observation{Outcome: NotSeen, Detail: fmt.Sprintf("none of the %d %s carries the operation's marker", listed, what)}, nil
	case 1:
		return Observation{Outcome: Found, ExternalID: matches[0].GetHTMLURL(),
			Detail: fmt.Sprintf("comment %d of the %d %s carries the operation's marker", matches[0].GetID(), listed, what)}, nil
	default:
		ids := make([]string, len(matches))
		for i, c := range matches {
			ids[i] = fmt.Sprint(c.GetID())
		}
		return Observation{Outcome: Ambiguous,
			Detail: fmt.Sprintf("%d %s carry the operation's marker: %s", len(matches), what, strings.Join(ids, ", "))}, nil
	}
}
