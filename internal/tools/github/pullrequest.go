package github

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// github_create_pull_request: a conditional tool. Its business key is the
// head and base ("pr:create:<owner>/<repo>:<head>:<base>"); its body carries
// the operation's Marker, and before it sends anything it records the
// commit its head branch is at. Its effect is found again by listing the
// pull requests of that head and base (pullRequestEffect).

type createPullArgs struct {
	repo                    ghref.Repo
	head, base, title, body string
}

var createPullRequestSchema = objectSchema([]string{"repo", "head", "base", "title", "body"}, map[string]any{
	"repo":  repoProp(),
	"head":  stringProp(`Branch of the same repository with the changes, e.g. "agent/fix-typo".`),
	"base":  stringProp(`Branch to merge into, e.g. "main".`),
	"title": stringProp("Pull request title."),
	"body":  stringProp("Pull request description (Markdown)."),
})

// pullRequestTool is github_create_pull_request. It is a tool.Preparer:
// before the pull request is opened it records the commit the head branch
// is at (PullRequestFacts), which its lookup (pullRequestEffect) matches.
type pullRequestTool struct {
	findable[createPullArgs]
}

// PullRequestFacts are what github_create_pull_request records before it
// sends its request.
type PullRequestFacts struct {
	// HeadSHA is the commit the head branch pointed at just before the
	// request was sent: the head a pull request it opened started from.
	HeadSHA string `json:"head_sha"`
}

// Prepare reads the head branch's ref and returns PullRequestFacts. A head
// branch GitHub does not show (404: it does not exist, or a replica has not
// seen it yet) gives no facts and no error: the request itself then decides
// (GitHub refuses a head it does not have), and a reconciler goes by the
// marker alone. Any other failure to read is an error carrying its verdict,
// and the wait a rate limit asked for.
func (t pullRequestTool) Prepare(ctx context.Context, call tool.Call) (json.RawMessage, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return nil, err
	}
	if t.c == nil {
		return nil, nil // Execute refuses the call, sending nothing
	}
	ref, _, err := t.c.Git.GetRef(ctx, a.repo.Owner, a.repo.Name, "heads/"+a.head)
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		return nil, nil
	case err != nil:
		return nil, marked(fmt.Errorf("github_create_pull_request: read head branch %s of %s: %w", a.head, a.repo, err))
	}
	return output(PullRequestFacts{HeadSHA: ref.GetObject().GetSHA()}), nil
}

func createPullRequestTool(c *gogithub.Client, self Self) tool.Tool {
	return pullRequestTool{findable[createPullArgs]{&ghTool[createPullArgs]{
		c:           c,
		name:        NameCreatePullRequest,
		description: "Open a pull request in a GitHub repository from a head branch into a base branch. At most one open pull request can exist per head and base.",
		class:       tool.Conditional,
		schema:      createPullRequestSchema,
		parse: func(v *validator, raw json.RawMessage) createPullArgs {
			var in struct {
				Repo  string `json:"repo"`
				Head  string `json:"head"`
				Base  string `json:"base"`
				Title string `json:"title"`
				Body  string `json:"body"`
			}
			v.decode(raw, &in)
			a := createPullArgs{repo: v.repo(in.Repo), head: v.branch("head", in.Head), base: v.branch("base", in.Base),
				title: v.nonBlank("title", in.Title), body: in.Body}
			if a.head == a.base && a.head != "" {
				v.fail("fields \"head\" and \"base\" must differ, but both are %q", a.head)
			}
			return a
		},
		target: func(a createPullArgs) tool.Target {
			return tool.Target{Repository: a.repo.String(), Branch: a.head, Into: a.base}
		},
		identify: func(a createPullArgs) tool.Identity {
			// Title and body do not define the effect: a retry that rewords
			// them is still the same pull request.
			return tool.Identity{
				BusinessKey: "pr:create:" + a.repo.Key() + ":" + a.head + ":" + a.base,
				Effect: canonical(struct {
					Repo string `json:"repo"`
					Head string `json:"head"`
					Base string `json:"base"`
				}{a.repo.Key(), a.head, a.base}),
			}
		},
		summary: func(name string, a createPullArgs) string {
			return fmt.Sprintf("%s %s %s → %s", name, a.repo, a.head, a.base)
		},
		run: func(ctx context.Context, opID string, a createPullArgs) (tool.Result, error) {
			if err := requireOperationID(NameCreatePullRequest, opID); err != nil {
				return tool.Result{}, err
			}
			pr, _, err := c.PullRequests.Create(ctx, a.repo.Owner, a.repo.Name, &gogithub.NewPullRequest{
				Title: &a.title, Head: &a.head, Base: &a.base, Body: gogithub.String(withMarker(a.body, opID))})
			if err != nil {
				return tool.Result{}, fmt.Errorf("github_create_pull_request: open %s → %s in %s: %w", a.head, a.base, a.repo, err)
			}
			out := struct {
				Number  int    `json:"number"`
				HTMLURL string `json:"html_url"`
				Head    string `json:"head"`
				Base    string `json:"base"`
				HeadSHA string `json:"head_sha"`
				State   string `json:"state"`
			}{pr.GetNumber(), pr.GetHTMLURL(), pr.GetHead().GetRef(), pr.GetBase().GetRef(), pr.GetHead().GetSHA(), pr.GetState()}
			return tool.Result{Output: output(out), ExternalID: pr.GetHTMLURL()}, nil
		},
		find: func(a createPullArgs, s tool.Sent) (tool.Effect, error) {
			if err := requireOperationID(NameCreatePullRequest, s.OperationID); err != nil {
				return nil, err
			}
			var facts PullRequestFacts
			if len(s.Facts) > 0 {
				if err := json.Unmarshal(s.Facts, &facts); err != nil {
					return nil, fmt.Errorf("%s: the facts recorded before sending do not decode: %w", NameCreatePullRequest, err)
				}
			}
			return pullRequestEffect{c: c, self: self, repo: a.repo, head: a.head, base: a.base, opID: s.OperationID,
				headSHA: facts.HeadSHA, since: s.Since, title: a.title, body: a.body}, nil
		},
	}}}
}

// pullRequestEffect is the pull request a github_create_pull_request call
// opens: one of the pull requests from head into base, recognised by the
// operation's marker in its body, or else by the head commit recorded
// before sending.
type pullRequestEffect struct {
	c          *gogithub.Client
	self       Self // the account whose pull requests count
	repo       ghref.Repo
	head, base string // branch names; the head is in repo
	opID       string
	// headSHA is the commit the head branch was at just before the request
	// was sent (PullRequestFacts); empty when nothing was recorded: then
	// only the marker counts.
	headSHA string
	// since is when the operation was first claimed; a pull request opened
	// before it (minus tool.ClockMargin) is not the operation's. Zero:
	// unknown.
	since time.Time
	// title and body are what the call sent (the body without its
	// marker): Settle sends them again.
	title, body string
}

func (e pullRequestEffect) Key() string {
	return fmt.Sprintf("a pull request of %s from %s into %s carrying %s", e.repo, e.head, e.base, Marker(e.opID))
}

// Find lists the pull requests of the head and base in every state and
// recognises the operation's among those opened by capstan's account
// (Self) by two marks, the marker first. A pull request anyone else opened
// is never the operation's, whatever its body says: it is NotSeen, and one
// carrying the marker is named in the detail as a copy. Not knowing
// capstan's login means the question was not asked.
//
//   - The marker in the body. Only this operation writes it, so a pull
//     request that carries it is the operation's whatever its head commit:
//     one is Found (its URL); several are Ambiguous (the operation opened
//     more than one; a person picks). A head that moved away from headSHA
//     does not count against it: an open pull request follows its branch,
//     so its head.sha is the branch's head now, and commits pushed after it
//     was opened (the agent's next file write, a person's push) move it.
//     Demanding the recorded commit there would make the operation's own
//     pull request absent, and the retry would open a second one.
//   - The head commit recorded before sending (headSHA). With the marker
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
func (e pullRequestEffect) Find(ctx context.Context) (tool.Observation, error) {
	self, err := e.self.Login(ctx)
	if err != nil {
		return tool.Observation{}, err
	}
	marker := Marker(e.opID)
	opts := &gogithub.PullRequestListOptions{State: "all", Head: e.repo.Owner + ":" + e.head, Base: e.base,
		ListOptions: gogithub.ListOptions{PerPage: perPage}}
	what := fmt.Sprintf("pull requests of %s from %s into %s", e.repo, opts.Head, e.base)
	listed := 0
	var marked, atHead, forged []*gogithub.PullRequest
	for page := 1; ; page++ {
		prs, resp, err := e.c.PullRequests.List(ctx, e.repo.Owner, e.repo.Name, opts)
		if err != nil {
			return tool.Observation{}, fmt.Errorf("list %s: %w", what, err)
		}
		listed += len(prs)
		for _, pr := range prs {
			switch {
			case !sameLogin(pr.GetUser().GetLogin(), self):
				if strings.Contains(pr.GetBody(), marker) {
					forged = append(forged, pr)
				}
			case strings.Contains(pr.GetBody(), marker):
				marked = append(marked, pr)
			case e.headSHA != "" && pr.GetHead().GetSHA() == e.headSHA && !openedBefore(pr, e.since) &&
				!strings.Contains(pr.GetBody(), anyMarker):
				atHead = append(atHead, pr)
			}
		}
		if resp.NextPage == 0 {
			break
		}
		if page == maxPages {
			return tool.Observation{}, fmt.Errorf("list %s: more than %d pages", what, maxPages)
		}
		opts.Page = resp.NextPage
	}
	note := ""
	if len(forged) > 0 {
		note = fmt.Sprintf(" (ignored, as not opened by %s: %s)", self, numbers(forged))
	}
	switch {
	case len(marked) == 1:
		pr := marked[0]
		return tool.Observation{Outcome: tool.Found, ExternalID: pr.GetHTMLURL(),
			Detail: fmt.Sprintf("pull request #%d (%s) by %s of the %d %s carries the operation's marker%s%s",
				pr.GetNumber(), pr.GetState(), self, listed, what, headNote(pr, e.headSHA), note)}, nil
	case len(marked) > 1:
		return tool.Observation{Outcome: tool.Ambiguous,
			Detail: fmt.Sprintf("%d %s by %s carry the operation's marker: %s%s", len(marked), what, self, numbers(marked), note)}, nil
	case len(atHead) > 0:
		return tool.Observation{Outcome: tool.Ambiguous, Detail: fmt.Sprintf(
			"none of the %d %s carries the operation's marker, but %s by %s %s at %s, the commit the head branch was at when the operation was sent, and opened since: the operation's with its marker removed, or another of capstan's%s",
			listed, what, numbers(atHead), self, isOrAre(len(atHead)), e.headSHA, note)}, nil
	default:
		return tool.Observation{Outcome: tool.NotSeen,
			Detail: fmt.Sprintf("none of the %d %s opened by %s carries the operation's marker%s%s", listed, what, self, e.notAtHeadNote(), note)}, nil
	}
}

// openedBefore reports whether pr was opened before since, less
// tool.ClockMargin: before the operation was claimed, so not by it.
func openedBefore(pr *gogithub.PullRequest, since time.Time) bool {
	return !since.IsZero() && pr.CreatedAt != nil && pr.GetCreatedAt().Before(since.Add(-tool.ClockMargin))
}

// headNote says where a found pull request's head is against the commit
// recorded before sending.
func headNote(pr *gogithub.PullRequest, recorded string) string {
	switch at := pr.GetHead().GetSHA(); {
	case recorded == "":
		return ""
	case at == recorded:
		return fmt.Sprintf("; its head is at %s, as recorded before it was opened", at)
	default:
		return fmt.Sprintf("; its head has moved from %s, recorded before it was opened, to %s", recorded, at)
	}
}

func (e pullRequestEffect) notAtHeadNote() string {
	if e.headSHA == "" {
		return ""
	}
	return fmt.Sprintf(", and none opened since the claim is at %s, the commit the head branch was at when the operation was sent", e.headSHA)
}

func numbers(prs []*gogithub.PullRequest) string {
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
