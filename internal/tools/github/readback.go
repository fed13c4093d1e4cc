package github

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// This file reads back the URL a person gives for an operation's effect
// (`starter resolve --found URL`, tool.ReadBack): each effect accepts only
// a web URL of its own kind, in its own repository, naming something that
// exists now, and answers with the ExternalID Execute would have recorded.
// The host is not compared: the API's and the web's differ (api.github.com,
// github.com; a GitHub Enterprise server's), and the repository named in
// the path is what is checked against the operation's.

// webURL is a GitHub web URL split into its repository, the path after it
// and the fragment: ".../OWNER/REPO/pull/7" → acme/app, [pull 7], "".
type webURL struct {
	repo     ghref.Repo
	rest     []string
	fragment string
}

// parseWebURL splits raw; ok is false when raw is not an http(s) URL whose
// path starts with a repository.
func parseWebURL(raw string) (webURL, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return webURL{}, false
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) < 2 {
		return webURL{}, false
	}
	repo, err := ghref.ParseRepo(segs[0] + "/" + segs[1])
	if err != nil {
		return webURL{}, false
	}
	return webURL{repo: repo, rest: segs[2:], fragment: u.Fragment}, true
}

// refused is the observation of a URL that does not name the effect.
func refused(format string, args ...any) tool.Observation {
	return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf(format, args...)}
}

// ReadBack accepts the URL of a pull request of the operation's
// repository, from its head into its base: ".../OWNER/REPO/pull/N".
func (e pullRequestEffect) ReadBack(ctx context.Context, raw string) (tool.Observation, error) {
	w, ok := parseWebURL(raw)
	n := 0
	if ok && len(w.rest) >= 2 && w.rest[0] == "pull" {
		n, _ = strconv.Atoi(w.rest[1])
	}
	switch {
	case n <= 0:
		return refused("%s is not a pull request URL (…/OWNER/REPO/pull/N)", raw), nil
	case w.repo.Key() != e.repo.Key():
		return refused("pull request %s#%d is not in %s, the operation's repository", w.repo, n, e.repo), nil
	}
	pr, _, err := e.c.PullRequests.Get(ctx, e.repo.Owner, e.repo.Name, n)
	switch {
	case notFound(err):
		return refused("%s has no pull request #%d", e.repo, n), nil
	case err != nil:
		return tool.Observation{}, fmt.Errorf("get pull request %s#%d: %w", e.repo, n, err)
	}
	if pr.GetHead().GetRef() != e.head || pr.GetBase().GetRef() != e.base {
		return refused("pull request %s#%d is from %s into %s, not from %s into %s as the operation asked",
			e.repo, n, pr.GetHead().GetRef(), pr.GetBase().GetRef(), e.head, e.base), nil
	}
	return tool.Observation{Outcome: tool.Found, ExternalID: pr.GetHTMLURL(),
		Detail: fmt.Sprintf("pull request %s#%d (%s) from %s into %s exists", e.repo, n, pr.GetState(), e.head, e.base)}, nil
}

// ReadBack accepts the URL of a comment on the operation's issue or pull
// request: ".../OWNER/REPO/issues/N#issuecomment-ID" (or pull/N).
func (e commentEffect) ReadBack(ctx context.Context, raw string) (tool.Observation, error) {
	w, ok := parseWebURL(raw)
	var n int
	var id int64
	if ok && len(w.rest) == 2 && (w.rest[0] == "issues" || w.rest[0] == "pull") && strings.HasPrefix(w.fragment, "issuecomment-") {
		n, _ = strconv.Atoi(w.rest[1])
		id, _ = strconv.ParseInt(strings.TrimPrefix(w.fragment, "issuecomment-"), 10, 64)
	}
	switch {
	case n <= 0 || id <= 0:
		return refused("%s is not a comment URL (…/OWNER/REPO/issues/N#issuecomment-ID)", raw), nil
	case w.repo.Key() != e.issue.Repo.Key() || n != e.issue.Number:
		return refused("comment %d is on %s#%d, not on %s where the operation comments", id, w.repo, n, e.issue), nil
	}
	// One comment by its id: GitHub answers at once, where the lists the
	// reconciler reads may lag.
	c, _, err := e.c.Issues.GetComment(ctx, e.issue.Repo.Owner, e.issue.Repo.Name, id)
	switch {
	case notFound(err):
		return refused("%s has no comment %d", e.issue.Repo, id), nil
	case err != nil:
		return tool.Observation{}, fmt.Errorf("get comment %d of %s: %w", id, e.issue.Repo, err)
	case !strings.HasSuffix(c.GetIssueURL(), "/issues/"+strconv.Itoa(e.issue.Number)):
		return refused("comment %d is not on %s, where the operation comments", id, e.issue), nil
	}
	return tool.Observation{Outcome: tool.Found, ExternalID: c.GetHTMLURL(),
		Detail: fmt.Sprintf("comment %d on %s exists", id, e.issue)}, nil
}

// ReadBack accepts the URL of the operation's branch in its repository:
// ".../OWNER/REPO/tree/BRANCH".
func (e branchEffect) ReadBack(ctx context.Context, raw string) (tool.Observation, error) {
	w, ok := parseWebURL(raw)
	if !ok || len(w.rest) < 2 || w.rest[0] != "tree" {
		return refused("%s is not a branch URL (…/OWNER/REPO/tree/BRANCH)", raw), nil
	}
	branch := strings.Join(w.rest[1:], "/")
	switch {
	case w.repo.Key() != e.repo.Key():
		return refused("branch %s is in %s, not in %s, the operation's repository", branch, w.repo, e.repo), nil
	case branch != e.branch:
		return refused("%s names branch %s, not %s, the operation's branch", raw, branch, e.branch), nil
	}
	ref, err := e.getRef(ctx, e.branch)
	switch {
	case notFound(err):
		return refused("branch %s does not exist in %s", e.branch, e.repo), nil
	case err != nil:
		return tool.Observation{}, err
	}
	at := ref.GetObject().GetSHA()
	return tool.Observation{Outcome: tool.Found, ExternalID: "refs/heads/" + e.branch + "@" + at,
		Detail: fmt.Sprintf("branch %s exists in %s at %s", e.branch, e.repo, at)}, nil
}

var (
	_ tool.ReadBack = pullRequestEffect{}
	_ tool.ReadBack = commentEffect{}
	_ tool.ReadBack = branchEffect{}
)
