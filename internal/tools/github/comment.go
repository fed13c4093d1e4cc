package github

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// github_comment: an unsafe tool, with no business key; a task's final
// answer is delivered through it too (ghref.CommentArguments). Its body
// carries the operation's Marker, by which its effect is found again
// (commentEffect).

type commentArgs struct {
	repo   ghref.Repo
	number int
	body   string
}

var commentSchema = objectSchema([]string{"repo", "number", "body"}, map[string]any{
	"repo":   repoProp(),
	"number": map[string]any{"type": "integer", "minimum": 1, "description": "Issue or pull request number."},
	"body":   stringProp("Comment text (Markdown)."),
})

func commentTool(c *gogithub.Client, self Self) tool.Tool {
	return findable[commentArgs]{&ghTool[commentArgs]{
		c:           c,
		name:        NameComment,
		description: "Post a comment on an issue or pull request of a GitHub repository. Each call posts a new comment.",
		class:       tool.Unsafe,
		schema:      commentSchema,
		parse: func(v *validator, raw json.RawMessage) commentArgs {
			var in struct {
				Repo   string      `json:"repo"`
				Number json.Number `json:"number"`
				Body   string      `json:"body"`
			}
			v.decode(raw, &in)
			a := commentArgs{repo: v.repo(in.Repo), body: v.nonBlank("body", in.Body)}
			// The schema admits integers from 1 up; GitHub's numbers are 32-bit.
			if f, err := in.Number.Float64(); err != nil || f > math.MaxInt32 {
				v.fail("field %q must be an issue or pull request number, not %s", "number", in.Number.String())
			} else {
				a.number = int(f)
			}
			return a
		},
		target: func(a commentArgs) tool.Target { return tool.Target{Repository: a.repo.String()} },
		identify: func(a commentArgs) tool.Identity {
			return tool.Identity{Effect: canonical(struct {
				Repo   string `json:"repo"`
				Number int    `json:"number"`
				Body   string `json:"body"`
			}{a.repo.Key(), a.number, a.body})}
		},
		summary: func(name string, a commentArgs) string {
			return fmt.Sprintf("%s %s #%d", name, a.repo, a.number)
		},
		run: func(ctx context.Context, opID string, a commentArgs) (tool.Result, error) {
			if err := requireOperationID(NameComment, opID); err != nil {
				return tool.Result{}, err
			}
			cm, _, err := c.Issues.CreateComment(ctx, a.repo.Owner, a.repo.Name, a.number,
				&gogithub.IssueComment{Body: gogithub.String(withMarker(a.body, opID))})
			if err != nil {
				return tool.Result{}, fmt.Errorf("github_comment: comment on %s#%d: %w", a.repo, a.number, err)
			}
			out := struct {
				ID      int64  `json:"id"`
				Number  int    `json:"number"`
				HTMLURL string `json:"html_url"`
			}{cm.GetID(), a.number, cm.GetHTMLURL()}
			return tool.Result{Output: output(out), ExternalID: cm.GetHTMLURL()}, nil
		},
		find: func(a commentArgs, s tool.Sent) (tool.Effect, error) {
			if err := requireOperationID(NameComment, s.OperationID); err != nil {
				return nil, err
			}
			return commentEffect{c: c, self: self, issue: ghref.Issue{Repo: a.repo, Number: a.number}, opID: s.OperationID, since: s.Since}, nil
		},
	}}
}

// commentEffect is the comment a github_comment call posts: found by the
// operation's marker among the issue's comments since the claim that
// capstan's own account wrote.
type commentEffect struct {
	c     *gogithub.Client
	self  Self // the account whose comments count
	issue ghref.Issue
	opID  string
	since time.Time // when the operation was claimed
}

func (e commentEffect) Key() string {
	return fmt.Sprintf("a comment on %s carrying %s", e.issue, Marker(e.opID))
}

// Find lists the comments of the issue updated since the claim, minus
// tool.ClockMargin, and picks those written by capstan's account (Self)
// whose body carries the operation's marker: one is Found (its URL),
// several are Ambiguous, none is NotSeen. A comment by anyone else carrying
// the marker is a copy, never the operation's: it is named in the detail
// and otherwise ignored. Not knowing capstan's login means the question
// was not asked.
func (e commentEffect) Find(ctx context.Context) (tool.Observation, error) {
	self, err := e.self.Login(ctx)
	if err != nil {
		return tool.Observation{}, err
	}
	marker := Marker(e.opID)
	since := e.since.Add(-tool.ClockMargin).UTC().Truncate(time.Second)
	opts := &gogithub.IssueListCommentsOptions{Since: &since, ListOptions: gogithub.ListOptions{PerPage: perPage}}
	what := fmt.Sprintf("comments on %s since %s", e.issue, since.Format(time.RFC3339))
	listed := 0
	var matches, forged []*gogithub.IssueComment
	for page := 1; ; page++ {
		cs, resp, err := e.c.Issues.ListComments(ctx, e.issue.Repo.Owner, e.issue.Repo.Name, e.issue.Number, opts)
		if err != nil {
			return tool.Observation{}, fmt.Errorf("list %s: %w", what, err)
		}
		listed += len(cs)
		for _, c := range cs {
			switch {
			case !strings.Contains(c.GetBody(), marker):
			case sameLogin(c.GetUser().GetLogin(), self):
				matches = append(matches, c)
			default:
				forged = append(forged, c)
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
	note := forgedNote(self, commentAuthors(forged))
	switch len(matches) {
	case 0:
		return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf("none of the %d %s by %s carries the operation's marker%s", listed, what, self, note)}, nil
	case 1:
		return tool.Observation{Outcome: tool.Found, ExternalID: matches[0].GetHTMLURL(),
			Detail: fmt.Sprintf("comment %d by %s of the %d %s carries the operation's marker%s", matches[0].GetID(), self, listed, what, note)}, nil
	default:
		return tool.Observation{Outcome: tool.Ambiguous,
			Detail: fmt.Sprintf("%d %s by %s carry the operation's marker: %s%s", len(matches), what, self,
				strings.Join(commentAuthors(matches), ", "), note)}, nil
	}
}

// commentAuthors names comments as "<id> by <login>".
func commentAuthors(cs []*gogithub.IssueComment) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%d by %s", c.GetID(), c.GetUser().GetLogin())
	}
	return out
}

// forgedNote mentions what carries the marker but was not written by self.
func forgedNote(self string, forged []string) string {
	if len(forged) == 0 {
		return ""
	}
	return fmt.Sprintf(" (ignored, as not written by %s: %s)", self, strings.Join(forged, ", "))
}
