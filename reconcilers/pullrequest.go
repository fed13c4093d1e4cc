package reconcilers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// PullRequestQuery looks for the pull request an operation opened.
type PullRequestQuery struct {
	Repo        Repo
	Head, Base  string // branch names; the head is in Repo
	OperationID string
	// HeadSHA is the commit the head branch was at just before the request
	// was sent, as the tool recorded it (githubtools.PullRequestFacts).
	// Empty when nothing was recorded: then only the marker counts.
	HeadSHA string
	// Since is when the operation was first claimed; a pull request opened
	// before it (minus ClockMargin) is not the operation's. Zero: unknown.
	Since time.Time
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
	var facts githubtools.PullRequestFacts
	if len(t.Facts) > 0 {
		if err := json.Unmarshal(t.Facts, &facts); err != nil {
			return PullRequestQuery{}, fmt.Errorf("%s: %w: the facts recorded before sending do not decode: %v", t.Kind, ErrBadTarget, err)
		}
	}
	return PullRequestQuery{Repo: repo, Head: a.Head, Base: a.Base, OperationID: t.OperationID,
		HeadSHA: facts.HeadSHA, Since: t.Since}, nil
}

// PullRequest lists the pull requests of q's head and base in every state
// and recognises the operation's by two marks, the marker first:
//
//   - The marker in the body. Only this operation writes it, so a pull
//     request that carries it is the operation's whatever its head commit:
//     one is Found (its URL); several are Ambiguous (the operation opened
//     more than one; a person picks). A head that moved away from q.HeadSHA
//     does not count against it: an open pull request follows its branch,
//     so its head.sha is the branch's head now, and commits pushed after it
//     was opened (the agent's next file write, a person's push) move it.
//     Demanding the recorded commit there would make the operation's own
//     pull request absent, and the retry would open a second one.
//   - The head commit recorded before sending (q.HeadSHA). With the marker
//     on none, pull requests whose head is still at that commit, that were
//     not opened before the claim and that carry no other operation's
//     marker may be the operation's with the marker edited out of the
//     body, or someone else's opened from the same commit: nothing here
//     tells which, so they are Ambiguous — never Found, for nothing proves
//     them ours, and never NotSeen, for sending again could open a second
//     pull request.
//
// Anything else is NotSeen: no pull request, or only ones without the marker
// that are at another commit, older than the claim, or another capstan
// operation's (they carry its marker) — someone else's. A pull request of
// the operation whose marker was edited out and whose branch then moved is
// indistinguishable from those; should the retry that follows meet it still
// open, GitHub refuses a second pull request for the same head and base.
func (g *GitHub) PullRequest(ctx context.Context, q PullRequestQuery) (Observation, error) {
	marker := githubtools.Marker(q.OperationID)
	opts := &github.PullRequestListOptions{State: "all", Head: q.Repo.Owner + ":" + q.Head, Base: q.Base,
		ListOptions: github.ListOptions{PerPage: perPage}}
	what := fmt.Sprintf("pull requests of %s from %s into %s", q.Repo, opts.Head, q.Base)
	listed := 0
	var marked, atHead []*github.PullRequest
	for page := 1; ; page++ {
		prs, resp, err := g.c.PullRequests.List(ctx, q.Repo.Owner, q.Repo.Name, opts)
		if err != nil {
			return Observation{}, fmt.Errorf("list %s: %w", what, err)
		}
		listed += len(prs)
		for _, pr := range prs {
			switch {
			case strings.Contains(pr.GetBody(), marker):
				marked = append(marked, pr)
			case q.HeadSHA != "" && pr.GetHead().GetSHA() == q.HeadSHA && !openedBefore(pr, q.Since) &&
				!strings.Contains(pr.GetBody(), anyMarker):
				atHead = append(atHead, pr)
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
	switch {
	case len(marked) == 1:
		pr := marked[0]
		return Observation{Outcome: Found, ExternalID: pr.GetHTMLURL(),
			Detail: fmt.Sprintf("pull request #%d (%s) of the %d %s carries the operation's marker%s",
				pr.GetNumber(), pr.GetState(), listed, what, headNote(pr, q.HeadSHA))}, nil
	case len(marked) > 1:
		return Observation{Outcome: Ambiguous,
			Detail: fmt.Sprintf("%d %s carry the operation's marker: %s", len(marked), what, numbers(marked))}, nil
	case len(atHead) > 0:
		return Observation{Outcome: Ambiguous, Detail: fmt.Sprintf(
			"none of the %d %s carries the operation's marker, but %s %s at %s, the commit the head branch was at when the operation was sent, and opened since: the operation's with its marker removed, or someone else's",
			listed, what, numbers(atHead), isOrAre(len(atHead)), q.HeadSHA)}, nil
	default:
		return Observation{Outcome: NotSeen,
			Detail: fmt.Sprintf("none of the %d %s carries the operation's marker%s", listed, what, notAtHeadNote(q))}, nil
	}
}

// anyMarker starts every operation's marker: a body that holds it, but not
// this operation's marker, is another operation's.
var anyMarker = strings.TrimSuffix(githubtools.Marker(""), " -->")

// openedBefore reports whether pr was opened before since, less
// ClockMargin: before the operation was claimed, so not by it.
func openedBefore(pr *github.PullRequest, since time.Time) bool {
	return !since.IsZero() && pr.CreatedAt != nil && pr.GetCreatedAt().Before(since.Add(-ClockMargin))
}

// headNote says where a found pull request's head is against the commit
// recorded before sending.
func headNote(pr *github.PullRequest, recorded string) string {
	switch at := pr.GetHead().GetSHA(); {
	case recorded == "":
		return ""
	case at == recorded:
		return fmt.Sprintf("; its head is at %s, as recorded before it was opened", at)
	default:
		return fmt.Sprintf("; its head has moved from %s, recorded before it was opened, to %s", recorded, at)
	}
}

func notAtHeadNote(q PullRequestQuery) string {
	if q.HeadSHA == "" {
		return ""
	}
	return fmt.Sprintf(", and none opened since the claim is at %s, the commit the head branch was at when the operation was sent", q.HeadSHA)
}

func numbers(prs []*github.PullRequest) string {
	nums := make([]string, len(prs))
	for i, pr := range prs {
		nums[i] = fmt.Sprintf("#%d", pr.GetNumber())
	}
	return strings.Join(nums, ", ")
}

func isOrAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
