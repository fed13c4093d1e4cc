package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	github "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// Each tool's lookup (its tool.Finder) runs against the sandbox's GitHub
// on loopback, with the real go-github client, and is formed from the very
// arguments the tool was called with, as a reconciler forms it.

type lookupFixture struct {
	sb  *sandbox.GitHub
	url string
	c   *github.Client // the test's own client, to arrange what GitHub holds
}

func newLookupFixture(t *testing.T) *lookupFixture {
	t.Helper()
	sb := sandbox.NewGitHub()
	srv := httptest.NewServer(sb)
	t.Cleanup(srv.Close)
	return &lookupFixture{sb: sb, url: srv.URL, c: newClient(t, srv.URL)}
}

// newClient returns a fresh client: go-github remembers rate limits per
// client, so a lookup that provokes one must not share it. It writes as
// the sandbox's own account (sandbox.GitHubLogin).
func newClient(t *testing.T, url string) *github.Client {
	t.Helper()
	return newClientAs(t, url, "test-token")
}

// newClientAs is newClient with the token given: a sandbox.SandboxUserToken
// writes as another user.
func newClientAs(t *testing.T, url, token string) *github.Client {
	t.Helper()
	c, err := githubtools.NewClient(url, token, &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// find forms the effect of a call of the tool name through the tool's
// tool.Finder, on a fresh client, and asks once.
func (f *lookupFixture) find(t *testing.T, name string, sent tool.Sent) (tool.Observation, error) {
	t.Helper()
	impl, err := tool.NewRegistry(githubtools.Tools(newClient(t, f.url))...).Get(name)
	if err != nil {
		t.Fatal(err)
	}
	finder, ok := impl.(tool.Finder)
	if !ok {
		t.Fatalf("%s is not a tool.Finder", name)
	}
	effect, err := finder.Effect(sent)
	if err != nil {
		t.Fatalf("%s: Effect(%s): %v", name, sent.Arguments, err)
	}
	if effect.Key() == "" {
		t.Errorf("%s: the effect has no key", name)
	}
	return effect.Find(context.Background())
}

func sent(opID, args string) tool.Sent {
	return tool.Sent{Call: tool.Call{OperationID: opID, Arguments: json.RawMessage(args)}}
}

func addFault(t *testing.T, sb *sandbox.GitHub, rule sandbox.FaultRule) {
	t.Helper()
	if err := sb.AddFault(rule); err != nil {
		t.Fatal(err)
	}
}

// branchAhead creates branch from main and commits one file to it, so a
// pull request from it has something to merge.
func (f *lookupFixture) branchAhead(t *testing.T, branch string) {
	t.Helper()
	ctx := context.Background()
	main, _, err := f.c.Git.GetRef(ctx, "acme", "app", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/" + branch),
		Object: &github.GitObject{SHA: main.Object.SHA}}); err != nil {
		t.Fatal(err)
	}
	f.push(t, branch, branch+".txt")
}

// push commits a file to branch, moving its head (and that of the open pull
// request from it), and returns the new head.
func (f *lookupFixture) push(t *testing.T, branch, path string) string {
	t.Helper()
	resp, _, err := f.c.Repositories.CreateFile(context.Background(), "acme", "app", path, &github.RepositoryContentFileOptions{
		Message: github.String("work on " + path), Content: []byte(path + "\n"), Branch: github.String(branch)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Commit.GetSHA()
}

// headOf returns the commit branch points at.
func (f *lookupFixture) headOf(t *testing.T, branch string) string {
	t.Helper()
	ref, _, err := f.c.Git.GetRef(context.Background(), "acme", "app", "heads/"+branch)
	if err != nil {
		t.Fatal(err)
	}
	return ref.GetObject().GetSHA()
}

func (f *lookupFixture) openPR(t *testing.T, head, body string) *github.PullRequest {
	t.Helper()
	pr, _, err := f.c.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
		Title: github.String("change"), Head: github.String(head), Base: github.String("main"), Body: github.String(body)})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func (f *lookupFixture) closePR(t *testing.T, number int) {
	t.Helper()
	if _, _, err := f.c.PullRequests.Edit(context.Background(), "acme", "app", number, &github.PullRequest{State: github.String("closed")}); err != nil {
		t.Fatal(err)
	}
}

// withMarker is a body as the tools write it.
func withMarker(body, opID string) string { return body + "\n\n" + githubtools.Marker(opID) }

func expect(t *testing.T, what string, obs tool.Observation, err error, want tool.Outcome, externalID string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: error %v, want %s", what, err, want)
	}
	if obs.Outcome != want || obs.ExternalID != externalID || obs.Detail == "" {
		t.Fatalf("%s: %+v, want %s with external id %q and a detail", what, obs, want, externalID)
	}
}

// expectCouldNotAsk fails unless the question failed: an error and no
// observation at all — never "not seen".
func expectCouldNotAsk(t *testing.T, what string, obs tool.Observation, err error) {
	t.Helper()
	if err == nil || obs != (tool.Observation{}) {
		t.Fatalf("%s: %+v, %v; want an error and no observation", what, obs, err)
	}
}

func prArgs(head string) string {
	return `{"repo":"acme/app","head":"` + head + `","base":"main","title":"t","body":"b"}`
}

func TestPullRequestLookup(t *testing.T) {
	f := newLookupFixture(t)
	find := func(head, opID string) (tool.Observation, error) {
		return f.find(t, githubtools.NameCreatePullRequest, sent(opID, prArgs(head)))
	}
	f.branchAhead(t, "feat")
	f.branchAhead(t, "other")

	obs, err := find("feat", "op-1")
	expect(t, "no pull request at all", obs, err, tool.NotSeen, "")

	// Someone else's pull request for the same branches is not ours; ours
	// (marker in the body) is found once the other is closed and ours opened.
	theirs := f.openPR(t, "feat", "opened by a person")
	obs, err = find("feat", "op-1")
	expect(t, "a pull request without the marker", obs, err, tool.NotSeen, "")
	f.closePR(t, theirs.GetNumber())
	ours := f.openPR(t, "feat", withMarker("fix", "op-1"))
	obs, err = find("feat", "op-1")
	expect(t, "our pull request", obs, err, tool.Found, ours.GetHTMLURL())
	// Another operation's marker, a prefix of ours, is not ours.
	obs, err = find("feat", "op-")
	expect(t, "a marker that merely starts the same", obs, err, tool.NotSeen, "")

	// Closed pull requests count (state=all): two carry the marker.
	f.closePR(t, ours.GetNumber())
	again := f.openPR(t, "feat", withMarker("fix, again", "op-1"))
	obs, err = find("feat", "op-1")
	expect(t, "two pull requests with the marker", obs, err, tool.Ambiguous, "")
	if !strings.Contains(obs.Detail, "#"+strconv.Itoa(ours.GetNumber())) || !strings.Contains(obs.Detail, "#"+strconv.Itoa(again.GetNumber())) {
		t.Errorf("detail %q does not name both pull requests", obs.Detail)
	}
	// The head filter holds: a marker on another head is not seen.
	f.openPR(t, "other", withMarker("x", "op-2"))
	obs, err = find("feat", "op-2")
	expect(t, "the marker on another head", obs, err, tool.NotSeen, "")

	// A lagging list shows nothing new: not seen, honestly.
	f.branchAhead(t, "late")
	late := f.openPR(t, "late", withMarker("late", "op-3"))
	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = find("late", "op-3")
	expect(t, "a lagging list", obs, err, tool.NotSeen, "")
	obs, err = find("late", "op-3")
	expect(t, "the list caught up", obs, err, tool.Found, late.GetHTMLURL())

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail, Status: 502, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultRateLimit, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultRateLimit, Status: 403, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultSecondaryRateLimit, Times: 1},
	} {
		addFault(t, f.sb, rule)
		obs, err := find("late", "op-3")
		expectCouldNotAsk(t, "pulls/list "+string(rule.Kind), obs, err)
	}
}

// With the head commit recorded before sending, the marker still decides
// whose a pull request is, and the head commit catches one whose marker was
// edited out.
func TestPullRequestLookupWithRecordedHead(t *testing.T) {
	f := newLookupFixture(t)
	claimed := time.Now()
	find := func(head, opID, sha string, since time.Time) (tool.Observation, error) {
		s := sent(opID, prArgs(head))
		s.Since = since
		if sha != "" {
			s.Facts = json.RawMessage(`{"head_sha":"` + sha + `"}`)
		}
		return f.find(t, githubtools.NameCreatePullRequest, s)
	}

	f.branchAhead(t, "feat")
	recorded := f.headOf(t, "feat")
	obs, err := find("feat", "op-1", recorded, claimed)
	expect(t, "nothing opened", obs, err, tool.NotSeen, "")

	ours := f.openPR(t, "feat", withMarker("fix", "op-1"))
	obs, err = find("feat", "op-1", recorded, claimed)
	expect(t, "the marker, at the recorded head", obs, err, tool.Found, ours.GetHTMLURL())
	if !strings.Contains(obs.Detail, "as recorded") {
		t.Errorf("detail %q should say the head is where it was recorded", obs.Detail)
	}

	// The agent pushes more work after the pull request opened: the pull
	// request follows its branch, and is still ours.
	moved := f.push(t, "feat", "more.txt")
	if pr, _, err := f.c.PullRequests.Get(context.Background(), "acme", "app", ours.GetNumber()); err != nil || pr.GetHead().GetSHA() != moved {
		t.Fatalf("pull request head %q, %v; want it to follow the branch to %s", pr.GetHead().GetSHA(), err, moved)
	}
	obs, err = find("feat", "op-1", recorded, claimed)
	expect(t, "the marker, the head moved on", obs, err, tool.Found, ours.GetHTMLURL())
	if !strings.Contains(obs.Detail, recorded) || !strings.Contains(obs.Detail, moved) {
		t.Errorf("detail %q should name the recorded head and where it moved", obs.Detail)
	}

	// No marker, at the recorded head, opened since the claim: perhaps ours
	// with the marker edited out, perhaps not — a person decides.
	f.branchAhead(t, "edited")
	at := f.headOf(t, "edited")
	unmarked := f.openPR(t, "edited", "fix (the marker was removed)")
	obs, err = find("edited", "op-2", at, claimed)
	expect(t, "no marker, at the recorded head", obs, err, tool.Ambiguous, "")
	if !strings.Contains(obs.Detail, "#"+strconv.Itoa(unmarked.GetNumber())) || !strings.Contains(obs.Detail, at) {
		t.Errorf("detail %q should name the pull request and the commit", obs.Detail)
	}
	// Closed, it is just as undecidable.
	f.closePR(t, unmarked.GetNumber())
	obs, err = find("edited", "op-2", at, claimed)
	expect(t, "no marker, at the recorded head, closed", obs, err, tool.Ambiguous, "")

	// Not ours: recorded at another commit, opened before the claim, or
	// another operation's (its marker); and without a recorded head only
	// the marker counts.
	obs, err = find("edited", "op-2", recorded, claimed)
	expect(t, "no marker, at another commit", obs, err, tool.NotSeen, "")
	obs, err = find("edited", "op-2", at, time.Now().Add(tool.ClockMargin+time.Minute))
	expect(t, "no marker, opened before the claim", obs, err, tool.NotSeen, "")
	obs, err = find("edited", "op-2", "", claimed)
	expect(t, "no marker, no recorded head", obs, err, tool.NotSeen, "")
	f.branchAhead(t, "theirs")
	f.openPR(t, "theirs", withMarker("another task's", "op-other"))
	obs, err = find("theirs", "op-3", f.headOf(t, "theirs"), claimed)
	expect(t, "another operation's marker, at the recorded head", obs, err, tool.NotSeen, "")

	// Someone else's pull request is never ours: not with our marker copied
	// into it, not at the recorded head without a marker.
	mallory := newClientAs(t, f.url, sandbox.SandboxUserToken("mallory"))
	for i, body := range []string{withMarker("copied", "op-5"), "no marker"} {
		branch := "mallory-" + strconv.Itoa(i)
		f.branchAhead(t, branch)
		pr, _, err := mallory.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
			Title: github.String("t"), Head: github.String(branch), Base: github.String("main"), Body: github.String(body)})
		if err != nil {
			t.Fatal(err)
		}
		obs, err = find(branch, "op-5", f.headOf(t, branch), claimed)
		expect(t, "mallory's pull request: "+body, obs, err, tool.NotSeen, "")
		if forged := "#" + strconv.Itoa(pr.GetNumber()); strings.Contains(body, "capstan-op") != strings.Contains(obs.Detail, forged) {
			t.Errorf("detail %q: a pull request with a copied marker, and only one, is named as ignored", obs.Detail)
		}
	}

	// The marker wins over a pull request at the recorded head without it.
	f.branchAhead(t, "both")
	both := f.headOf(t, "both")
	f.closePR(t, f.openPR(t, "both", "a person's").GetNumber())
	mine := f.openPR(t, "both", withMarker("fix", "op-4"))
	obs, err = find("both", "op-4", both, claimed)
	expect(t, "the marker beside an unmarked one at the head", obs, err, tool.Found, mine.GetHTMLURL())
}

func TestBranchLookup(t *testing.T) {
	f := newLookupFixture(t)
	ctx := context.Background()
	find := func(from string) (tool.Observation, error) {
		return f.find(t, githubtools.NameCreateBranch, sent("op-b", `{"repo":"acme/app","branch":"feat","from":"`+from+`"}`))
	}

	obs, err := find("main")
	expect(t, "no branch", obs, err, tool.NotSeen, "")

	sha := f.headOf(t, "main")
	if _, _, err := f.c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/feat"),
		Object: &github.GitObject{SHA: &sha}}); err != nil {
		t.Fatal(err)
	}
	obs, err = find("main")
	expect(t, "branch at main", obs, err, tool.Found, "refs/heads/feat@"+sha)
	obs, err = find(sha)
	expect(t, "branch at the commit", obs, err, tool.Found, "refs/heads/feat@"+sha)

	// main moves on: without the commit main was at when the request was
	// sent, the branch may still be ours, or someone else's.
	f.push(t, "main", "moved.txt")
	obs, err = find("main")
	expect(t, "branch behind a moved main", obs, err, tool.Ambiguous, "")
	if !strings.Contains(obs.Detail, "someone else") || !strings.Contains(obs.Detail, sha) {
		t.Errorf("detail %q should say where the branch is and that someone else may have made it", obs.Detail)
	}
	// With that commit recorded (BranchFacts), the branch at it is found
	// however far main has moved; a branch elsewhere is still ambiguous.
	findRecorded := func(at string) (tool.Observation, error) {
		s := sent("op-b", `{"repo":"acme/app","branch":"feat","from":"main"}`)
		s.Facts = json.RawMessage(`{"from_sha":"` + at + `"}`)
		return f.find(t, githubtools.NameCreateBranch, s)
	}
	obs, err = findRecorded(sha)
	expect(t, "branch at the commit main was at when sent", obs, err, tool.Found, "refs/heads/feat@"+sha)
	obs, err = findRecorded(f.headOf(t, "main"))
	expect(t, "branch not at the commit recorded", obs, err, tool.Ambiguous, "")
	obs, err = find(strings.Repeat("a", 40))
	expect(t, "branch at another commit", obs, err, tool.Ambiguous, "")
	obs, err = find("gone")
	expect(t, "from a branch that does not exist", obs, err, tool.Ambiguous, "")

	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = find(sha)
	expect(t, "a lagging ref", obs, err, tool.NotSeen, "")

	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultFail, Times: 1})
	obs, err = find(sha)
	expectCouldNotAsk(t, "git/get-ref failing", obs, err)
	// The branch is there, but resolving "main" fails: still could not ask.
	f.sb.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if !strings.HasSuffix(r.URL.Path, "/git/ref/heads/main") {
			return false
		}
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return true
	})
	obs, err = find("main")
	expectCouldNotAsk(t, "git/get-ref failing for the from branch", obs, err)
	f.sb.SetFault(nil)
}

func TestFileLookup(t *testing.T) {
	f := newLookupFixture(t)
	find := func(path, content string) (tool.Observation, error) {
		args, _ := json.Marshal(map[string]string{"repo": "acme/app", "branch": "main", "path": path, "content": content, "message": "notes"})
		return f.find(t, githubtools.NamePutFile, sent("op-f", string(args)))
	}

	obs, err := find("docs/notes.md", "hello\n")
	expect(t, "no file", obs, err, tool.NotSeen, "")

	resp, _, err := f.c.Repositories.CreateFile(context.Background(), "acme", "app", "docs/notes.md", &github.RepositoryContentFileOptions{
		Message: github.String("notes"), Content: []byte("hello\n"), Branch: github.String("main")})
	if err != nil {
		t.Fatal(err)
	}
	obs, err = find("docs/notes.md", "hello\n")
	expect(t, "the content is there", obs, err, tool.Found, resp.GetContent().GetSHA())
	obs, err = find("docs/notes.md", "goodbye\n")
	expect(t, "other content is there", obs, err, tool.NotSeen, "")
	obs, err = find("docs", "hello\n")
	expect(t, "a directory", obs, err, tool.NotSeen, "")

	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultFail, Status: 503, Times: 1})
	obs, err = find("docs/notes.md", "hello\n")
	expectCouldNotAsk(t, "repos/get-content failing", obs, err)
}

func TestCommentLookup(t *testing.T) {
	f := newLookupFixture(t)
	ctx := context.Background()
	issue, _, err := f.c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("bug")})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	args := `{"repo":"acme/app","number":` + strconv.Itoa(issue.GetNumber()) + `,"body":"ours"}`
	find := func(since time.Time) (tool.Observation, error) {
		s := sent("op-c", args)
		s.Since = since
		return f.find(t, githubtools.NameComment, s)
	}
	comment := func(body string) *github.IssueComment {
		t.Helper()
		cm, _, err := f.c.Issues.CreateComment(ctx, "acme", "app", issue.GetNumber(), &github.IssueComment{Body: github.String(body)})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}

	obs, err := find(claimed)
	expect(t, "no comment", obs, err, tool.NotSeen, "")

	// Someone else copies our marker into a comment: it is not ours, and
	// the detail says it was ignored.
	mallory := newClientAs(t, f.url, sandbox.SandboxUserToken("mallory"))
	forged, _, err := mallory.Issues.CreateComment(ctx, "acme", "app", issue.GetNumber(),
		&github.IssueComment{Body: github.String(withMarker("not capstan's", "op-c"))})
	if err != nil {
		t.Fatal(err)
	}
	obs, err = find(claimed)
	expect(t, "our marker in mallory's comment", obs, err, tool.NotSeen, "")
	if !strings.Contains(obs.Detail, strconv.FormatInt(forged.GetID(), 10)+" by mallory") {
		t.Errorf("detail %q should name the forged comment as ignored", obs.Detail)
	}
	comment("a person's comment")
	comment(withMarker("another operation's", "op-other"))
	obs, err = find(claimed)
	expect(t, "comments without our marker", obs, err, tool.NotSeen, "")

	ours := comment(withMarker("ours", "op-c"))
	obs, err = find(claimed)
	expect(t, "our comment", obs, err, tool.Found, ours.GetHTMLURL())

	// Not knowing who capstan is, the lookup cannot tell: not asked.
	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "users/get-authenticated", Kind: sandbox.FaultFail, Times: 1})
	obs, err = find(claimed)
	expectCouldNotAsk(t, "GET /user failed", obs, err)

	// Only comments since the claim (minus the margin) are searched.
	obs, err = find(claimed.Add(time.Hour))
	expect(t, "a claim after the comment", obs, err, tool.NotSeen, "")

	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "issues/list-comments", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = find(claimed)
	expect(t, "a lagging list", obs, err, tool.NotSeen, "")

	comment(withMarker("ours, twice", "op-c"))
	obs, err = find(claimed)
	expect(t, "two comments with our marker", obs, err, tool.Ambiguous, "")

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "issues/list-comments", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "issues/list-comments", Kind: sandbox.FaultSecondaryRateLimit, Times: 1},
	} {
		addFault(t, f.sb, rule)
		obs, err := find(claimed)
		expectCouldNotAsk(t, "issues/list-comments "+string(rule.Kind), obs, err)
	}
}

// AuthenticatedUser asks GitHub who the token's user is once, and keeps
// the answer; a failed question is asked again.
func TestAuthenticatedUser(t *testing.T) {
	f := newLookupFixture(t)
	ctx := context.Background()
	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "users/get-authenticated", Kind: sandbox.FaultFail, Times: 1})
	self := githubtools.AuthenticatedUser(newClient(t, f.url))
	if login, err := self.Login(ctx); err == nil {
		t.Fatalf("Login under a 500 = %q, want an error", login)
	}
	for i := range 2 {
		login, err := self.Login(ctx)
		if err != nil || login != sandbox.GitHubLogin {
			t.Fatalf("Login #%d = %q, %v; want %q", i+2, login, err, sandbox.GitHubLogin)
		}
		// A failure now would show if Login asked again.
		addFault(t, f.sb, sandbox.FaultRule{Endpoint: "users/get-authenticated", Kind: sandbox.FaultFail, Times: 1})
	}
	f.sb.ClearFaults()
	if login, err := githubtools.AuthenticatedUser(newClientAs(t, f.url, sandbox.SandboxUserToken("mallory"))).Login(ctx); err != nil || login != "mallory" {
		t.Errorf("another token's Login = %q, %v; want mallory", login, err)
	}
	if login, err := githubtools.FixedLogin("capstan-app[bot]").Login(ctx); err != nil || login != "capstan-app[bot]" {
		t.Errorf("FixedLogin = %q, %v", login, err)
	}
}

// Every conditional and unsafe tool can be looked up, and so can the
// idempotent github_put_file (its lookup is also its Verify's read-back);
// the read-only tools have no effect to look up. Effect parses the
// arguments as Execute does, refuses what cannot form a question, and
// without a client says so.
func TestFinders(t *testing.T) {
	finders := map[string]bool{}
	for _, impl := range githubtools.Tools(nil) {
		if _, ok := impl.(tool.Finder); ok {
			finders[impl.Name()] = true
		}
		if want := impl.Class() == tool.Conditional || impl.Class() == tool.Unsafe; want && !finders[impl.Name()] {
			t.Errorf("%s is %s but has no lookup", impl.Name(), impl.Class())
		}
	}
	if finders[githubtools.NameGetFile] || finders[githubtools.NameListPullRequests] || !finders[githubtools.NamePutFile] {
		t.Errorf("finders %v: want every write, and no read", finders)
	}

	offline := tool.NewRegistry(githubtools.Tools(nil)...)
	impl, _ := offline.Get(githubtools.NameCreateBranch)
	if _, err := impl.(tool.Finder).Effect(sent("op", `{"repo":"acme/app","branch":"b","from":"main"}`)); !errors.Is(err, tool.ErrNotConfigured) {
		t.Errorf("without a client: %v, want tool.ErrNotConfigured", err)
	}

	online := tool.NewRegistry(githubtools.Tools(newClient(t, "http://127.0.0.1:1"))...)
	for _, tc := range []struct{ name, what string }{
		{githubtools.NameCreateBranch, `{"repo":"acme","branch":"b","from":"main"}`},
		{githubtools.NameCreatePullRequest, `{"repo":"acme/app","base":"main"}`},
		{githubtools.NamePutFile, `{"repo":"acme/app","branch":"b","path":"x"}`},
		{githubtools.NameComment, `{"repo":"acme/app","number":0,"body":"x"}`},
	} {
		impl, _ := online.Get(tc.name)
		if _, err := impl.(tool.Finder).Effect(sent("op", tc.what)); !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("%s %s: %v, want the tool's own refusal", tc.name, tc.what, err)
		}
	}
	for _, tc := range []struct {
		name string
		s    tool.Sent
	}{
		{githubtools.NameComment, sent("", `{"repo":"acme/app","number":1,"body":"x"}`)},
		{githubtools.NameCreatePullRequest, sent("", prArgs("feat"))},
		{githubtools.NameCreatePullRequest, tool.Sent{Call: tool.Call{OperationID: "op", Arguments: json.RawMessage(prArgs("feat")),
			Facts: json.RawMessage(`{"head_sha":1}`)}}},
	} {
		impl, _ := online.Get(tc.name)
		if e, err := impl.(tool.Finder).Effect(tc.s); err == nil {
			t.Errorf("%s %+v: effect %v, want an error", tc.name, tc.s, e)
		}
	}
}

// A comment delivery's arguments (ghref.CommentArguments) are github_comment
// arguments: the tool accepts them, and its lookup goes to that issue.
func TestCommentDeliveryArguments(t *testing.T) {
	impl, err := tool.NewRegistry(githubtools.Tools(newClient(t, "http://127.0.0.1:1"))...).Get(githubtools.NameComment)
	if err != nil {
		t.Fatal(err)
	}
	args := ghref.CommentArguments("acme/app", 7, "The answer.")
	if _, err := impl.Identify(args); err != nil {
		t.Fatalf("Identify(%s): %v", args, err)
	}
	effect, err := impl.(tool.Finder).Effect(sent("op-d", string(args)))
	if err != nil || !strings.Contains(effect.Key(), "acme/app#7") || !strings.Contains(effect.Key(), githubtools.Marker("op-d")) {
		t.Fatalf("Effect(%s) = %v, %v; want a comment on acme/app#7 with the marker", args, effect, err)
	}
}
