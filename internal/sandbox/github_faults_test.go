package sandbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/sandbox"
)

// ghCall is one request to one endpoint, made with go-github as capstan's
// tools and reconcilers make it.
type ghCall struct {
	endpoint string
	run      func(ctx context.Context, c *github.Client, f ghFix) error
	// effect reads the counter the call moves; nil for a read.
	effect func(sandbox.GitHubStats) int64
}

// ghCalls covers the endpoints capstan's tools and reconcilers use. They run
// against ghFixture's repository.
var ghCalls = []ghCall{
	{"git/create-ref", func(ctx context.Context, c *github.Client, f ghFix) error {
		_, _, err := c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/new"), Object: &github.GitObject{SHA: &f.mainSHA}})
		return err
	}, func(s sandbox.GitHubStats) int64 { return s.BranchesCreated }},
	{"git/get-ref", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/feature")
		return err
	}, nil},
	{"repos/create-or-update-file-contents", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.Repositories.CreateFile(ctx, "acme", "app", "new.txt", &github.RepositoryContentFileOptions{
			Message: github.String("add"), Content: []byte("new\n"), Branch: github.String("feature")})
		return err
	}, func(s sandbox.GitHubStats) int64 { return s.FilesWritten }},
	{"repos/get-content", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, _, err := c.Repositories.GetContents(ctx, "acme", "app", "feature.txt", &github.RepositoryContentGetOptions{Ref: "feature"})
		return err
	}, nil},
	{"pulls/create", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
			Title: github.String("topic"), Head: github.String("topic"), Base: github.String("main")})
		return err
	}, func(s sandbox.GitHubStats) int64 { return s.PullRequestsCreated }},
	{"pulls/list", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.PullRequests.List(ctx, "acme", "app", &github.PullRequestListOptions{State: "all", Head: "acme:feature", Base: "main"})
		return err
	}, nil},
	{"issues/create-comment", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String("hi")})
		return err
	}, func(s sandbox.GitHubStats) int64 { return s.CommentsCreated }},
	{"issues/list-comments", func(ctx context.Context, c *github.Client, _ ghFix) error {
		_, _, err := c.Issues.ListComments(ctx, "acme", "app", 1, &github.IssueListCommentsOptions{Since: &time.Time{}})
		return err
	}, nil},
}

// ghFix is a fake holding acme/app with a branch "feature" one commit ahead
// of main and open as pull request #1, and a branch "topic" one commit ahead
// of main without a pull request.
type ghFix struct {
	g       *sandbox.GitHub
	c       *github.Client
	srv     *httptest.Server
	mainSHA string
}

func ghFixture(t *testing.T) ghFix {
	t.Helper()
	g, c, srv := newGitHub(t, "/")
	createBranchAhead(t, c, "app", "feature")
	createBranchAhead(t, c, "app", "topic")
	if _, _, err := c.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
		Title: github.String("feature"), Head: github.String("feature"), Base: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	return ghFix{g: g, c: c, srv: srv, mainSHA: mainSHA(t, c, "app")}
}

// newGitHubClient is a go-github client of its own for srv: a rate limit
// one client has seen makes that client refuse to send until it passes.
func newGitHubClient(t *testing.T, srv *httptest.Server, hc *http.Client) *github.Client {
	t.Helper()
	c := github.NewClient(hc)
	u, err := url.Parse(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	c.BaseURL = u
	return c
}

func addFault(t *testing.T, g *sandbox.GitHub, rule sandbox.FaultRule) {
	t.Helper()
	if err := g.AddFault(rule); err != nil {
		t.Fatal(err)
	}
}

func wantFired(t *testing.T, g *sandbox.GitHub, n int) {
	t.Helper()
	if fs := g.Faults(); len(fs) != 1 || fs[0].Fired != n {
		t.Errorf("faults = %+v, want one that fired %d times", fs, n)
	}
}

// effectOf reads c's counter, or 0 for a read.
func effectOf(c ghCall, s sandbox.GitHubStats) int64 {
	if c.effect == nil {
		return 0
	}
	return c.effect(s)
}

// TestGitHubRefusalFaultsChangeNothing: fail and both rate limits answer
// before the fake acts, on every endpoint, and apply only to the first
// request; go-github reads each as it reads GitHub's.
func TestGitHubRefusalFaultsChangeNothing(t *testing.T) {
	refusals := []struct {
		name      string
		rule      sandbox.FaultRule
		holdsBack bool // go-github then refuses to send until the limit passes
		check     func(t *testing.T, err error, now time.Time)
	}{
		{"fail", sandbox.FaultRule{Kind: sandbox.FaultFail, Times: 1, Status: http.StatusBadGateway}, false, func(t *testing.T, err error, _ time.Time) {
			wantStatus(t, err, http.StatusBadGateway, "Server Error")
		}},
		{"secondary rate limit", sandbox.FaultRule{Kind: sandbox.FaultSecondaryRateLimit, Times: 1, RetryAfter: 1500 * time.Millisecond}, true,
			func(t *testing.T, err error, _ time.Time) {
				var rl *github.AbuseRateLimitError
				if !errors.As(err, &rl) || rl.Response.StatusCode != http.StatusForbidden || rl.RetryAfter == nil ||
					*rl.RetryAfter != 2*time.Second || !strings.HasPrefix(rl.Message, "You have exceeded a secondary rate limit.") {
					t.Fatalf("err = %#v, want a 403 AbuseRateLimitError retrying after 2s", err)
				}
			}},
		{"rate limit 429", sandbox.FaultRule{Kind: sandbox.FaultRateLimit, Times: 1}, true, func(t *testing.T, err error, now time.Time) {
			// go-github v62 turns only a 403 into a RateLimitError; a 429
			// is a plain ErrorResponse that carries the headers.
			wantStatus(t, err, http.StatusTooManyRequests, "API rate limit exceeded")
			var er *github.ErrorResponse
			errors.As(err, &er)
			h := er.Response.Header
			reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
			if h.Get("X-RateLimit-Remaining") != "0" || reset < now.Add(time.Minute).Unix() || reset > now.Add(time.Minute+2*time.Second).Unix() {
				t.Fatalf("headers %v, want remaining 0 and a reset a minute after %v", h, now)
			}
		}},
		{"rate limit 403", sandbox.FaultRule{Kind: sandbox.FaultRateLimit, Times: 1, Status: http.StatusForbidden, RetryAfter: time.Hour}, true,
			func(t *testing.T, err error, now time.Time) {
				var rl *github.RateLimitError
				if !errors.As(err, &rl) || rl.Rate.Remaining != 0 || rl.Rate.Reset.Before(now.Add(time.Hour-time.Second)) {
					t.Fatalf("err = %#v, want a RateLimitError resetting in an hour", err)
				}
			}},
	}
	for _, rf := range refusals {
		for _, call := range ghCalls {
			t.Run(rf.name+"/"+call.endpoint, func(t *testing.T) {
				f := ghFixture(t)
				g, c, srv := f.g, f.c, f.srv
				ctx := context.Background()
				before := g.Stats()
				rule := rf.rule
				rule.Endpoint = call.endpoint
				addFault(t, g, rule)
				now := time.Now()
				rf.check(t, call.run(ctx, c, f), now)
				if after := g.Stats(); after != before {
					t.Fatalf("stats moved under a refusal: %+v, then %+v", before, after)
				}
				if rf.holdsBack {
					if err := call.run(ctx, c, f); err == nil || g.Faults()[0].Fired != 1 || g.Stats() != before {
						t.Fatalf("after a rate limit the same client sent again: %v", err)
					}
				}
				// The rule is spent: the same call now acts. (A fresh
				// client: go-github holds back after a rate limit.)
				if err := call.run(ctx, newGitHubClient(t, srv, srv.Client()), f); err != nil {
					t.Fatalf("second call: %v", err)
				}
				if got, want := effectOf(call, g.Stats()), effectOf(call, before)+boolToInt(call.effect != nil); got != want {
					t.Errorf("effect counter = %d, want %d", got, want)
				}
				wantFired(t, g, 1)
			})
		}
	}
}

func boolToInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestGitHubDropActsThenLosesTheAnswer: the fake acts, once, and the client
// sees the connection close with no answer.
func TestGitHubDropActsThenLosesTheAnswer(t *testing.T) {
	for _, call := range ghCalls {
		t.Run(call.endpoint, func(t *testing.T) {
			f := ghFixture(t)
			g, srv := f.g, f.srv
			// A connection per request: net/http resends a GET, once,
			// when a reused connection closes without an answer, which
			// would hide a drop on a read.
			c := newGitHubClient(t, srv, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
			before := g.Stats()
			addFault(t, g, sandbox.FaultRule{Endpoint: call.endpoint, Kind: sandbox.FaultDrop, Times: 1})
			err := call.run(context.Background(), c, f)
			var ue *url.Error
			var er *github.ErrorResponse
			if !errors.As(err, &ue) || errors.As(err, &er) {
				t.Fatalf("err = %v, want a transport error and no response", err)
			}
			after := g.Stats()
			if got, want := effectOf(call, after), effectOf(call, before)+boolToInt(call.effect != nil); got != want {
				t.Errorf("effect counter = %d, want %d: a drop acts once", got, want)
			}
			if after.Requests != before.Requests+1 {
				t.Errorf("requests %d → %d, want one more", before.Requests, after.Requests)
			}
			wantFired(t, g, 1)
		})
	}
}

// TestGitHubDroppedWritesAreThere: after a dropped create, what a
// reconciler reads finds the effect, and a blind retry is refused or
// repeated exactly as on GitHub.
func TestGitHubDroppedWritesAreThere(t *testing.T) {
	f := ghFixture(t)
	g, srv := f.g, f.srv
	ctx := context.Background()
	c := newGitHubClient(t, srv, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
	for _, e := range []string{"git/create-ref", "pulls/create", "issues/create-comment"} {
		addFault(t, g, sandbox.FaultRule{Endpoint: e, Kind: sandbox.FaultDrop, Times: 1})
	}
	sha := f.mainSHA
	newRef := &github.Reference{Ref: github.String("refs/heads/agent/x"), Object: &github.GitObject{SHA: &sha}}
	if _, _, err := c.Git.CreateRef(ctx, "acme", "app", newRef); err == nil {
		t.Fatal("create ref: want the dropped connection")
	}
	ref, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/agent/x")
	if err != nil || ref.GetObject().GetSHA() != sha {
		t.Fatalf("get ref after a dropped create: %v, %v", ref, err)
	}
	_, _, err = c.Git.CreateRef(ctx, "acme", "app", newRef)
	wantStatus(t, err, http.StatusUnprocessableEntity, "Reference already exists")

	newPR := &github.NewPullRequest{Title: github.String("t"), Head: github.String("topic"), Base: github.String("main")}
	if _, _, err := c.PullRequests.Create(ctx, "acme", "app", newPR); err == nil {
		t.Fatal("create pull: want the dropped connection")
	}
	prs, _, err := c.PullRequests.List(ctx, "acme", "app", &github.PullRequestListOptions{State: "all", Head: "acme:topic", Base: "main"})
	if err != nil || len(prs) != 1 {
		t.Fatalf("list after a dropped create: %v, %v", prs, err)
	}
	_, _, err = c.PullRequests.Create(ctx, "acme", "app", newPR)
	wantStatus(t, err, http.StatusUnprocessableEntity, "A pull request already exists for acme:topic.")

	comment := &github.IssueComment{Body: github.String("done <!-- capstan-op: op-1 -->")}
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, comment); err == nil {
		t.Fatal("create comment: want the dropped connection")
	}
	// A comment is not idempotent: a blind retry posts it twice, which is
	// why capstan reconciles by marker first.
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, comment); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.BranchesCreated != 3 || s.PullRequestsCreated != 2 || s.CommentsCreated != 2 {
		t.Errorf("stats = %+v, want 3 branches, 2 pull requests, 2 comments", s)
	}
}

// heldHandler wraps the API with a SetFault that reports when a request's
// handling is over, so a test can wait for it.
func heldHandler(g *sandbox.GitHub) <-chan struct{} {
	done := make(chan struct{}, 16)
	g.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		defer func() { done <- struct{}{} }()
		next.ServeHTTP(w, r)
		return true
	})
	return done
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the handler still runs 10s after the client gave up", what)
	}
}

// TestGitHubDelayOutlastsTheClient: the fake acts, holds the answer past
// the client's deadline, and lets go of the request when the client leaves.
func TestGitHubDelayOutlastsTheClient(t *testing.T) {
	for _, call := range ghCalls {
		t.Run(call.endpoint, func(t *testing.T) {
			f := ghFixture(t)
			g := f.g
			before := g.Stats()
			addFault(t, g, sandbox.FaultRule{Endpoint: call.endpoint, Kind: sandbox.FaultDelay, Times: 1, Delay: time.Hour})
			done := heldHandler(g)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if err := call.run(ctx, f.c, f); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the client's deadline", err)
			}
			waitDone(t, done, call.endpoint)
			if got, want := effectOf(call, g.Stats()), effectOf(call, before)+boolToInt(call.effect != nil); got != want {
				t.Errorf("effect counter = %d, want %d: a delay acts once", got, want)
			}
			wantFired(t, g, 1)
		})
	}
}

func TestGitHubDelayedAnswerIsTheRealOne(t *testing.T) {
	f := ghFixture(t)
	g, c := f.g, f.c
	const delay = 300 * time.Millisecond
	addFault(t, g, sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDelay, Times: 1, Delay: delay})
	start := time.Now()
	pr, resp, err := c.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
		Title: github.String("t"), Head: github.String("topic"), Base: github.String("main")})
	if err != nil || resp.StatusCode != http.StatusCreated || pr.GetNumber() != 2 || pr.GetHead().GetRef() != "topic" {
		t.Fatalf("create = %v, %v, %v", pr, resp, err)
	}
	if waited := time.Since(start); waited < delay {
		t.Errorf("answered after %v, want at least %v", waited, delay)
	}
}

// TestGitHubLaggingReads: under lag, lists and get-ref do not show what was
// created less than the lag ago; from the lag on, they do.
func TestGitHubLaggingReads(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	clock := sandbox.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC))
	g.SetNow(clock.Now)
	ctx := context.Background()
	createBranchAhead(t, c, "app", "feature") // created at T; everything below too
	if _, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{
		Title: github.String("t"), Head: github.String("feature"), Base: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.String("hi")}); err != nil {
		t.Fatal(err)
	}
	const lag = 5 * time.Second
	for _, e := range []string{"git/get-ref", "pulls/list", "issues/list-comments", "issues/list-comments-for-repo"} {
		addFault(t, g, sandbox.FaultRule{Endpoint: e, Kind: sandbox.FaultLag, Lag: lag})
	}
	visible := func() (ref, pulls, comments, repoComments bool) {
		t.Helper()
		_, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/feature")
		if err != nil {
			wantStatus(t, err, http.StatusNotFound, "Not Found")
		}
		prs, _, perr := c.PullRequests.List(ctx, "acme", "app", &github.PullRequestListOptions{State: "all", Head: "acme:feature", Base: "main"})
		cs, _, cerr := c.Issues.ListComments(ctx, "acme", "app", 1, nil)
		rcs, _, rerr := c.Issues.ListComments(ctx, "acme", "app", 0, nil)
		if err := errors.Join(perr, cerr, rerr); err != nil {
			t.Fatal(err)
		}
		return err == nil, len(prs) == 1, len(cs) == 1, len(rcs) == 1
	}
	if ref, pulls, comments, repoComments := visible(); ref || pulls || comments || repoComments {
		t.Errorf("at once: ref %v, pulls %v, comments %v, repo comments %v; want all hidden", ref, pulls, comments, repoComments)
	}
	if _, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/main"); err != nil {
		t.Errorf("main, which predates the lag, is hidden: %v", err)
	}
	clock.Advance(lag - time.Nanosecond)
	if ref, pulls, comments, repoComments := visible(); ref || pulls || comments || repoComments {
		t.Errorf("just before the lag: ref %v, pulls %v, comments %v, repo comments %v; want all hidden", ref, pulls, comments, repoComments)
	}
	clock.Advance(time.Nanosecond)
	if ref, pulls, comments, repoComments := visible(); !ref || !pulls || !comments || !repoComments {
		t.Errorf("after the lag: ref %v, pulls %v, comments %v, repo comments %v; want all shown", ref, pulls, comments, repoComments)
	}
	if fs := g.Faults(); fs[0].Fired != 4 || fs[1].Fired != 3 {
		t.Errorf("faults = %+v, want every read counted", fs)
	}
}

func TestGitHubLagAppliesToFirstTimes(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	createBranchAhead(t, c, "app", "feature")
	addFault(t, g, sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 2})
	for range 2 {
		_, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/feature")
		wantStatus(t, err, http.StatusNotFound, "Not Found")
	}
	if _, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/feature"); err != nil {
		t.Fatalf("third read: %v", err)
	}
	wantFired(t, g, 2)
	g.ClearFaults()
	if fs := g.Faults(); len(fs) != 0 {
		t.Errorf("after ClearFaults: %+v", fs)
	}
}

func TestGitHubFaultRulesApplyInOrder(t *testing.T) {
	g, c, _ := newGitHub(t, "/")
	ctx := context.Background()
	addFault(t, g, sandbox.FaultRule{Endpoint: "repos/get", Kind: sandbox.FaultFail, Times: 1, Status: 503})
	addFault(t, g, sandbox.FaultRule{Endpoint: "repos/get", Kind: sandbox.FaultFail, Times: 1, Status: 504})
	addFault(t, g, sandbox.FaultRule{Endpoint: "pulls/get", Kind: sandbox.FaultFail})
	for _, want := range []int{503, 504} {
		_, _, err := c.Repositories.Get(ctx, "acme", "app")
		wantStatus(t, err, want, "Server Error")
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("third get: %v", err)
	}
	for range 3 { // times 0: every request
		_, _, err := c.PullRequests.Get(ctx, "acme", "app", 1)
		wantStatus(t, err, http.StatusInternalServerError, "Server Error")
	}
	fs := g.Faults()
	if len(fs) != 3 || fs[0].Fired != 1 || fs[1].Fired != 1 || fs[2].Fired != 3 || fs[2].Status != 500 {
		t.Errorf("faults = %+v", fs)
	}
}

func TestGitHubAddFaultRejectsBadRules(t *testing.T) {
	g := sandbox.NewGitHub()
	for _, tc := range []struct {
		rule sandbox.FaultRule
		want string
	}{
		{sandbox.FaultRule{Endpoint: "pulls/merge", Kind: sandbox.FaultFail}, "unknown endpoint"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: "explode"}, "unknown kind"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultFail, Times: -1}, "times"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDelay}, "delay is required"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Delay: time.Second}, "delay is required by kind delay and only allowed there"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultLag, Lag: time.Second}, "does not lag"},
		{sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultLag}, "lag is required"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultFail, Status: 404}, "500 to 599"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Status: 500}, "status is only"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultRateLimit, Status: 503}, "429 or 403"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultSecondaryRateLimit, Status: 429}, "always status 403"},
		{sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultFail, RetryAfter: time.Second}, "retry_after"},
	} {
		if err := g.AddFault(tc.rule); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddFault(%+v) = %v, want an error about %q", tc.rule, err, tc.want)
		}
	}
	if fs := g.Faults(); len(fs) != 0 {
		t.Errorf("a bad rule was kept: %+v", fs)
	}
}
