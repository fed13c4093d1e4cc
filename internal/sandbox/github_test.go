package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
)

// The GitHub fake is exercised through go-github itself, so every path,
// method and JSON field here is one the real client uses.

func newGitHub(t *testing.T, prefix string) (*sandbox.GitHub, *github.Client, *httptest.Server) {
	t.Helper()
	g := sandbox.NewGitHub()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	c := github.NewClient(srv.Client())
	u, err := url.Parse(srv.URL + prefix)
	if err != nil {
		t.Fatal(err)
	}
	c.BaseURL = u
	return g, c, srv
}

func wantStatus(t *testing.T, err error, status int, msg string) {
	t.Helper()
	var er *github.ErrorResponse
	if !errors.As(err, &er) {
		t.Fatalf("err = %v, want a %d ErrorResponse", err, status)
	}
	if er.Response.StatusCode != status || !strings.Contains(fmt.Sprint(er.Message, er.Errors), msg) {
		t.Fatalf("got %d %q %+v, want %d containing %q", er.Response.StatusCode, er.Message, er.Errors, status, msg)
	}
}

func mainSHA(t *testing.T, c *github.Client, repo string) string {
	t.Helper()
	ref, _, err := c.Git.GetRef(context.Background(), "acme", repo, "heads/main")
	if err != nil {
		t.Fatalf("GetRef main: %v", err)
	}
	return ref.GetObject().GetSHA()
}

func createBranch(t *testing.T, c *github.Client, repo, branch string) string {
	t.Helper()
	sha := mainSHA(t, c, repo)
	_, _, err := c.Git.CreateRef(context.Background(), "acme", repo, &github.Reference{
		Ref: github.String("refs/heads/" + branch), Object: &github.GitObject{SHA: &sha}})
	if err != nil {
		t.Fatalf("CreateRef %s: %v", branch, err)
	}
	return sha
}

// createBranchAhead creates branch with one commit that main lacks, so a
// pull request from it has something to merge, and returns its head sha.
func createBranchAhead(t *testing.T, c *github.Client, repo, branch string) string {
	t.Helper()
	createBranch(t, c, repo, branch)
	return commitFile(t, c, repo, branch, branch+".txt")
}

// commitFile adds the new file path to branch and returns the commit's sha.
func commitFile(t *testing.T, c *github.Client, repo, branch, path string) string {
	t.Helper()
	res, _, err := c.Repositories.CreateFile(context.Background(), "acme", repo, path, &github.RepositoryContentFileOptions{
		Message: github.String("add " + path), Content: []byte(path + "\n"), Branch: github.String(branch)})
	if err != nil {
		t.Fatalf("CreateFile %s on %s: %v", path, branch, err)
	}
	return res.Commit.GetSHA()
}

func TestGitHubProvisionsRepoOnFirstTouch(t *testing.T) {
	_, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	file, _, _, err := c.Repositories.GetContents(ctx, "acme", "payments", "README.md", nil)
	if err != nil {
		t.Fatalf("GetContents: %v", err)
	}
	content, err := file.GetContent()
	if err != nil || content != "# payments\n" {
		t.Fatalf("README = %q, %v", content, err)
	}
	// `printf '# payments\n' | git hash-object --stdin`
	if got, want := file.GetSHA(), "62a655994812d49852672bb30b2cd1c4863a6c5a"; got != want {
		t.Errorf("blob sha = %s, want git's %s", got, want)
	}
	if sha := mainSHA(t, c, "payments"); len(sha) != 40 {
		t.Errorf("main sha = %q", sha)
	}
	_, _, err = c.Git.GetRef(ctx, "acme", "payments", "heads/nope")
	wantStatus(t, err, http.StatusNotFound, "Not Found")
	_, _, _, err = c.Repositories.GetContents(ctx, "acme", "payments", "missing.md", nil)
	wantStatus(t, err, http.StatusNotFound, "Not Found")
	_, _, _, err = c.Repositories.GetContents(ctx, "acme", "payments", "README.md", &github.RepositoryContentGetOptions{Ref: "nope"})
	wantStatus(t, err, http.StatusNotFound, "No commit found for the ref nope")
}

func TestGitHubCreateRef(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	sha := createBranch(t, c, "app", "agent/fix")
	ref, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/agent/fix")
	if err != nil || ref.GetObject().GetSHA() != sha || ref.GetRef() != "refs/heads/agent/fix" {
		t.Fatalf("GetRef = %+v, %v", ref, err)
	}
	_, _, err = c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/agent/fix"), Object: &github.GitObject{SHA: &sha}})
	wantStatus(t, err, http.StatusUnprocessableEntity, "Reference already exists")
	_, _, err = c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/other"), Object: &github.GitObject{SHA: github.String(strings.Repeat("0", 40))}})
	wantStatus(t, err, http.StatusUnprocessableEntity, "Object does not exist")
	if s := g.Stats(); s.BranchesCreated != 1 {
		t.Errorf("BranchesCreated = %d, want 1", s.BranchesCreated)
	}
}

func TestGitHubContentsCompareAndSet(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	createBranch(t, c, "app", "feature")
	put := func(content, sha string) (*github.RepositoryContentResponse, *github.Response, error) {
		opts := &github.RepositoryContentFileOptions{Message: github.String("edit"), Content: []byte(content), Branch: github.String("feature")}
		if sha != "" {
			opts.SHA = &sha
		}
		return c.Repositories.CreateFile(ctx, "acme", "app", "docs/guide.md", opts)
	}
	created, resp, err := put("v1\n", "")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v, %v", resp, err)
	}
	blob1 := created.GetContent().GetSHA()
	_, _, err = put("v2\n", "")
	wantStatus(t, err, http.StatusUnprocessableEntity, `"sha" wasn't supplied`)
	_, _, err = put("v2\n", strings.Repeat("a", 40))
	wantStatus(t, err, http.StatusConflict, "does not match")
	updated, resp, err := put("v2\n", blob1)
	if err != nil || resp.StatusCode != http.StatusOK || updated.Commit.Parents[0].GetSHA() != created.Commit.GetSHA() {
		t.Fatalf("update: %v, %v", resp, err)
	}
	opts := &github.RepositoryContentFileOptions{Message: github.String("x"), Content: []byte("x"), Branch: github.String("gone")}
	_, _, err = c.Repositories.CreateFile(ctx, "acme", "app", "x.md", opts)
	wantStatus(t, err, http.StatusNotFound, "Branch gone not found")

	file, _, _, err := c.Repositories.GetContents(ctx, "acme", "app", "docs/guide.md", &github.RepositoryContentGetOptions{Ref: "feature"})
	if got, _ := file.GetContent(); err != nil || got != "v2\n" {
		t.Fatalf("read back %q, %v", got, err)
	}
	_, _, _, err = c.Repositories.GetContents(ctx, "acme", "app", "docs/guide.md", nil)
	wantStatus(t, err, http.StatusNotFound, "Not Found") // main is untouched
	_, dir, _, err := c.Repositories.GetContents(ctx, "acme", "app", "", &github.RepositoryContentGetOptions{Ref: "feature"})
	if err != nil || len(dir) != 2 || dir[0].GetPath() != "README.md" || dir[1].GetType() != "dir" {
		t.Fatalf("root listing = %v, %v", dir, err)
	}
	if s := g.Stats(); s.FilesWritten != 2 {
		t.Errorf("FilesWritten = %d, want 2", s.FilesWritten)
	}
}

func TestGitHubPullRequests(t *testing.T) {
	g, c, srv := newGitHub(t, "/")
	ctx := context.Background()
	headSHA := createBranchAhead(t, c, "app", "feature")
	createBranchAhead(t, c, "app", "other")
	newPR := func(head, base string) (*github.PullRequest, error) {
		pr, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
			Title: github.String("t " + head), Head: &head, Base: &base, Body: github.String("b")})
		return pr, err
	}
	pr, err := newPR("feature", "main")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if pr.GetNumber() != 1 || pr.GetHTMLURL() != srv.URL+"/acme/app/pull/1" || pr.GetHead().GetSHA() != headSHA || pr.CreatedAt == nil {
		t.Errorf("pr = number %d url %s head %s", pr.GetNumber(), pr.GetHTMLURL(), pr.GetHead().GetSHA())
	}
	_, err = newPR("feature", "main")
	wantStatus(t, err, http.StatusUnprocessableEntity, "A pull request already exists for acme:feature.")
	_, err = newPR("missing", "main")
	wantStatus(t, err, http.StatusUnprocessableEntity, "head")
	if _, err := newPR("other", "main"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PullRequests.Edit(ctx, "acme", "app", 2, &github.PullRequest{State: github.String("closed")}); err != nil {
		t.Fatal(err)
	}

	list := func(opts github.PullRequestListOptions) ([]int, *github.Response) {
		t.Helper()
		prs, resp, err := c.PullRequests.List(ctx, "acme", "app", &opts)
		if err != nil {
			t.Fatalf("list %+v: %v", opts, err)
		}
		var n []int
		for _, p := range prs {
			n = append(n, p.GetNumber())
		}
		return n, resp
	}
	for _, tc := range []struct {
		opts github.PullRequestListOptions
		want string
	}{
		{github.PullRequestListOptions{}, "[1]"},
		{github.PullRequestListOptions{State: "all"}, "[2 1]"},
		{github.PullRequestListOptions{State: "closed"}, "[2]"},
		{github.PullRequestListOptions{State: "all", Head: "acme:other"}, "[2]"},
		{github.PullRequestListOptions{State: "all", Head: "ACME:feature", Base: "main"}, "[1]"},
		{github.PullRequestListOptions{State: "all", Head: "someone:feature"}, "[]"},
		{github.PullRequestListOptions{State: "all", Head: "feature"}, "[2 1]"}, // like GitHub: ignored without owner
		{github.PullRequestListOptions{State: "all", Base: "dev"}, "[]"},
		{github.PullRequestListOptions{State: "all", Direction: "asc"}, "[1 2]"},
	} {
		if got, _ := list(tc.opts); fmt.Sprint(got) != tc.want && !(tc.want == "[]" && got == nil) {
			t.Errorf("list %+v = %v, want %s", tc.opts, got, tc.want)
		}
	}
	page1, resp := list(github.PullRequestListOptions{State: "all", ListOptions: github.ListOptions{PerPage: 1}})
	if fmt.Sprint(page1) != "[2]" || resp.NextPage != 2 || resp.LastPage != 2 {
		t.Errorf("page 1 = %v next %d last %d", page1, resp.NextPage, resp.LastPage)
	}
	page2, resp := list(github.PullRequestListOptions{State: "all", ListOptions: github.ListOptions{PerPage: 1, Page: 2}})
	if fmt.Sprint(page2) != "[1]" || resp.NextPage != 0 || resp.PrevPage != 1 {
		t.Errorf("page 2 = %v next %d prev %d", page2, resp.NextPage, resp.PrevPage)
	}
	_, _, err = c.PullRequests.Get(ctx, "acme", "app", 9)
	wantStatus(t, err, http.StatusNotFound, "Not Found")

	// An open pull request follows its head branch.
	sha := pr.GetHead().GetSHA()
	commitFile(t, c, "app", "feature", "f.txt")
	got := g.PullRequests("acme/app")
	if len(got) != 2 || got[0].HeadSHA == sha || got[0].Head != "feature" || got[0].Body != "b" || got[1].State != "closed" {
		t.Errorf("PullRequests = %+v", got)
	}
	if s := g.Stats(); s.PullRequestsCreated != 2 {
		t.Errorf("PullRequestsCreated = %d, want 2", s.PullRequestsCreated)
	}
}

func TestGitHubComments(t *testing.T) {
	g, c, srv := newGitHub(t, "/")
	ctx := context.Background()
	issue, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("bug")})
	if err != nil || issue.GetNumber() != 1 {
		t.Fatalf("create issue: %v, %v", issue, err)
	}
	first, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String("one")})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s/acme/app/issues/1#issuecomment-%d", srv.URL, first.GetID()); first.GetHTMLURL() != want {
		t.Errorf("html_url = %s, want %s", first.GetHTMLURL(), want)
	}
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String("two")}); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Issues.CreateComment(ctx, "acme", "app", 7, &github.IssueComment{Body: github.String("x")})
	wantStatus(t, err, http.StatusNotFound, "Not Found")
	_, _, err = c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String(" ")})
	wantStatus(t, err, http.StatusUnprocessableEntity, "body")

	count := func(number int, since time.Time) int {
		t.Helper()
		opts := &github.IssueListCommentsOptions{}
		if !since.IsZero() {
			opts.Since = &since
		}
		cs, _, err := c.Issues.ListComments(ctx, "acme", "app", number, opts)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		return len(cs)
	}
	if n := count(1, time.Time{}); n != 2 {
		t.Errorf("comments = %d, want 2", n)
	}
	if n := count(1, first.GetCreatedAt().Time); n != 2 {
		t.Errorf("comments since the first = %d, want 2", n)
	}
	if n := count(0, time.Now().Add(time.Hour)); n != 0 {
		t.Errorf("comments since the future = %d, want 0", n)
	}
	if cs := g.Comments("acme/app", 1); len(cs) != 2 || cs[0].Body != "one" || cs[0].ID != first.GetID() {
		t.Errorf("Comments = %+v", cs)
	}
	if s := g.Stats(); s.CommentsCreated != 2 {
		t.Errorf("CommentsCreated = %d, want 2", s.CommentsCreated)
	}
}

func TestGitHubStatsEndpointCountsAuthorization(t *testing.T) {
	g, c, srv := newGitHub(t, "/")
	ctx := context.Background()
	if _, _, err := c.WithAuthToken("secret").Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	var raw map[string]int64
	testenv.GetJSON(t, srv.URL+"/_sandbox/stats", &raw)
	want := map[string]int64{"requests": 2, "authorized_requests": 1, "branches_created": 0,
		"files_written": 0, "pull_requests_created": 0, "comments_created": 0}
	if fmt.Sprint(raw) != fmt.Sprint(want) {
		t.Errorf("stats = %v, want %v", raw, want)
	}
	if s := g.Stats(); s.Requests != 2 {
		t.Errorf("reading stats counted as a request: %+v", s)
	}
}

func TestGitHubFaults(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	comment := func() error {
		_, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String("hi")})
		return err
	}
	if _, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("t")}); err != nil {
		t.Fatal(err)
	}

	// A fault that answers first: nothing happens.
	g.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		http.Error(w, `{"message":"Server Error"}`, http.StatusInternalServerError)
		return true
	})
	var er *github.ErrorResponse
	if err := comment(); !errors.As(err, &er) || er.Response.StatusCode != http.StatusInternalServerError {
		t.Fatalf("err = %v, want 500", err)
	}
	if s := g.Stats(); s.CommentsCreated != 0 || s.Requests != 1 {
		t.Fatalf("after an answering fault: %+v", s)
	}

	// A fault that lets the fake act and loses the answer: the effect counts.
	g.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		next.ServeHTTP(httptest.NewRecorder(), r)
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	if err := comment(); !errors.As(err, &er) || er.Response.StatusCode != http.StatusBadGateway {
		t.Fatalf("err = %v, want 502", err)
	}
	g.SetFault(nil)
	if err := comment(); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.CommentsCreated != 2 || len(g.Comments("acme/app", 1)) != 2 {
		t.Fatalf("after a lost answer: %+v", s)
	}
}

func TestGitHubServesUnderPathPrefix(t *testing.T) {
	_, c, srv := newGitHub(t, "/api/v3/")
	ctx := context.Background()
	createBranchAhead(t, c, "app", "feature")
	pr, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
		Title: github.String("t"), Head: github.String("feature"), Base: github.String("main")})
	if err != nil {
		t.Fatal(err)
	}
	if pr.GetHTMLURL() != srv.URL+"/acme/app/pull/1" || pr.GetURL() != srv.URL+"/api/v3/repos/acme/app/pulls/1" {
		t.Errorf("html_url %s, url %s", pr.GetHTMLURL(), pr.GetURL())
	}
}

func TestGitHubConcurrentComments(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	if _, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("t")}); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	ids := make(chan int64, n)
	for i := range n {
		wg.Go(func() {
			cm, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String(fmt.Sprint(i))})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- cm.GetID()
		})
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != n || g.Stats().CommentsCreated != n {
		t.Errorf("%d distinct ids, stats %+v", len(seen), g.Stats())
	}
}

func TestGitHubReopenRespectsOpenDuplicate(t *testing.T) {
	_, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	createBranchAhead(t, c, "app", "feature")
	open := func() *github.PullRequest {
		t.Helper()
		pr, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
			Title: github.String("t"), Head: github.String("acme:feature"), Base: github.String("main")})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	setState := func(n int, state string) error {
		_, _, err := c.PullRequests.Edit(ctx, "acme", "app", n, &github.PullRequest{State: &state})
		return err
	}
	first := open()
	if err := setState(first.GetNumber(), "closed"); err != nil {
		t.Fatal(err)
	}
	second := open() // allowed: the first one is closed
	wantStatus(t, setState(first.GetNumber(), "open"), http.StatusUnprocessableEntity, "already exists")
	if err := setState(second.GetNumber(), "closed"); err != nil {
		t.Fatal(err)
	}
	if err := setState(first.GetNumber(), "open"); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	pr, _, err := c.PullRequests.Get(ctx, "acme", "app", first.GetNumber())
	if err != nil || pr.GetState() != "open" || pr.ClosedAt != nil {
		t.Errorf("reopened = %v, %v", pr, err)
	}
	wantStatus(t, setState(first.GetNumber(), "merged"), http.StatusUnprocessableEntity, "state")
}
