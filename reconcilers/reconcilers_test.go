package reconcilers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/reconcilers"
)

// The reconcilers run against the sandbox's real loopback servers, with the
// real go-github and slack-go clients.

const eventType = "capstan_delivery"

var acme = reconcilers.Repo{Owner: "acme", Name: "app"}

func startSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// newGitHubClient returns a fresh client: go-github remembers rate limits
// per client, so a test that provokes one must not share it.
func newGitHubClient(t *testing.T, sb *sandbox.Sandbox) *github.Client {
	t.Helper()
	c, err := githubtools.NewClient(sb.GitHubURL, "test-token", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newSlackClient(sb *sandbox.Sandbox) *slack.Client {
	return slack.New("xoxb-test", slack.OptionAPIURL(sb.SlackURL))
}

func addFault(t *testing.T, f interface{ AddFault(sandbox.FaultRule) error }, rule sandbox.FaultRule) {
	t.Helper()
	if err := f.AddFault(rule); err != nil {
		t.Fatal(err)
	}
}

// branchAhead creates branch from main and commits one file to it, so a
// pull request from it has something to merge.
func branchAhead(t *testing.T, c *github.Client, branch string) string {
	t.Helper()
	ctx := context.Background()
	main, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/" + branch),
		Object: &github.GitObject{SHA: main.Object.SHA}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.CreateFile(ctx, "acme", "app", branch+".txt", &github.RepositoryContentFileOptions{
		Message: github.String("work"), Content: []byte(branch + "\n"), Branch: github.String(branch)}); err != nil {
		t.Fatal(err)
	}
	return main.GetObject().GetSHA()
}

func openPR(t *testing.T, c *github.Client, head, body string) *github.PullRequest {
	t.Helper()
	pr, _, err := c.PullRequests.Create(context.Background(), "acme", "app", &github.NewPullRequest{
		Title: github.String("change"), Head: github.String(head), Base: github.String("main"), Body: github.String(body)})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func closePR(t *testing.T, c *github.Client, number int) {
	t.Helper()
	if _, _, err := c.PullRequests.Edit(context.Background(), "acme", "app", number, &github.PullRequest{State: github.String("closed")}); err != nil {
		t.Fatal(err)
	}
}

// withMarker is a body as the tools write it.
func withMarker(body, opID string) string { return body + "\n\n" + githubtools.Marker(opID) }

func expect(t *testing.T, what string, obs reconcilers.Observation, err error, want reconcilers.Outcome, externalID string) {
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
func expectCouldNotAsk(t *testing.T, what string, obs reconcilers.Observation, err error) {
	t.Helper()
	if err == nil || obs != (reconcilers.Observation{}) {
		t.Fatalf("%s: %+v, %v; want an error and no observation", what, obs, err)
	}
	if errors.Is(err, reconcilers.ErrBadTarget) || errors.Is(err, reconcilers.ErrNoReconciler) {
		t.Fatalf("%s: %v is a permanent error, want one that says the question could not be asked", what, err)
	}
}

func TestPullRequest(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	q := func(head, opID string) reconcilers.PullRequestQuery {
		return reconcilers.PullRequestQuery{Repo: acme, Head: head, Base: "main", OperationID: opID}
	}
	branchAhead(t, c, "feat")
	branchAhead(t, c, "other")

	obs, err := reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-1"))
	expect(t, "no pull request at all", obs, err, reconcilers.NotSeen, "")

	// Someone else's pull request for the same branches is not ours; ours
	// (marker in the body) is found once the other is closed and ours opened.
	theirs := openPR(t, c, "feat", "opened by a person")
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-1"))
	expect(t, "a pull request without the marker", obs, err, reconcilers.NotSeen, "")
	closePR(t, c, theirs.GetNumber())
	ours := openPR(t, c, "feat", withMarker("fix", "op-1"))
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-1"))
	expect(t, "our pull request", obs, err, reconcilers.Found, ours.GetHTMLURL())
	// Another operation's marker, a prefix of ours, is not ours.
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-"))
	expect(t, "a marker that merely starts the same", obs, err, reconcilers.NotSeen, "")

	// Closed pull requests count (state=all): two carry the marker.
	closePR(t, c, ours.GetNumber())
	again := openPR(t, c, "feat", withMarker("fix, again", "op-1"))
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-1"))
	expect(t, "two pull requests with the marker", obs, err, reconcilers.Ambiguous, "")
	if !strings.Contains(obs.Detail, "#"+itoa(ours.GetNumber())) || !strings.Contains(obs.Detail, "#"+itoa(again.GetNumber())) {
		t.Errorf("detail %q does not name both pull requests", obs.Detail)
	}
	// The head filter holds: a marker on another head is not seen.
	openPR(t, c, "other", withMarker("x", "op-2"))
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("feat", "op-2"))
	expect(t, "the marker on another head", obs, err, reconcilers.NotSeen, "")

	// A lagging list shows nothing new: not seen, honestly.
	branchAhead(t, c, "late")
	late := openPR(t, c, "late", withMarker("late", "op-3"))
	addFault(t, sb.GitHub, sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("late", "op-3"))
	expect(t, "a lagging list", obs, err, reconcilers.NotSeen, "")
	obs, err = reconcilers.NewGitHub(c).PullRequest(ctx, q("late", "op-3"))
	expect(t, "the list caught up", obs, err, reconcilers.Found, late.GetHTMLURL())

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail, Status: 502, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultRateLimit, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultRateLimit, Status: 403, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultSecondaryRateLimit, Times: 1},
	} {
		addFault(t, sb.GitHub, rule)
		obs, err := reconcilers.NewGitHub(newGitHubClient(t, sb)).PullRequest(ctx, q("late", "op-3"))
		expectCouldNotAsk(t, "pulls/list "+string(rule.Kind), obs, err)
	}
}

// headOf returns the commit branch points at.
func headOf(t *testing.T, c *github.Client, branch string) string {
	t.Helper()
	ref, _, err := c.Git.GetRef(context.Background(), "acme", "app", "heads/"+branch)
	if err != nil {
		t.Fatal(err)
	}
	return ref.GetObject().GetSHA()
}

// push commits a file to branch, moving its head (and that of the open pull
// request from it), and returns the new head.
func push(t *testing.T, c *github.Client, branch, path string) string {
	t.Helper()
	resp, _, err := c.Repositories.CreateFile(context.Background(), "acme", "app", path, &github.RepositoryContentFileOptions{
		Message: github.String("more work"), Content: []byte(path + "\n"), Branch: github.String(branch)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Commit.GetSHA()
}

// With the head commit recorded before sending, the marker still decides
// whose a pull request is, and the head commit catches one whose marker was
// edited out.
func TestPullRequestWithRecordedHead(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	g := reconcilers.NewGitHub(c)
	claimed := time.Now()
	q := func(head, opID, sha string) reconcilers.PullRequestQuery {
		return reconcilers.PullRequestQuery{Repo: acme, Head: head, Base: "main", OperationID: opID, HeadSHA: sha, Since: claimed}
	}

	branchAhead(t, c, "feat")
	recorded := headOf(t, c, "feat")
	obs, err := g.PullRequest(ctx, q("feat", "op-1", recorded))
	expect(t, "nothing opened", obs, err, reconcilers.NotSeen, "")

	ours := openPR(t, c, "feat", withMarker("fix", "op-1"))
	obs, err = g.PullRequest(ctx, q("feat", "op-1", recorded))
	expect(t, "the marker, at the recorded head", obs, err, reconcilers.Found, ours.GetHTMLURL())
	if !strings.Contains(obs.Detail, "as recorded") {
		t.Errorf("detail %q should say the head is where it was recorded", obs.Detail)
	}

	// The agent pushes more work after the pull request opened: the pull
	// request follows its branch, and is still ours.
	moved := push(t, c, "feat", "more.txt")
	if pr, _, err := c.PullRequests.Get(ctx, "acme", "app", ours.GetNumber()); err != nil || pr.GetHead().GetSHA() != moved {
		t.Fatalf("pull request head %q, %v; want it to follow the branch to %s", pr.GetHead().GetSHA(), err, moved)
	}
	obs, err = g.PullRequest(ctx, q("feat", "op-1", recorded))
	expect(t, "the marker, the head moved on", obs, err, reconcilers.Found, ours.GetHTMLURL())
	if !strings.Contains(obs.Detail, recorded) || !strings.Contains(obs.Detail, moved) {
		t.Errorf("detail %q should name the recorded head and where it moved", obs.Detail)
	}

	// No marker, at the recorded head, opened since the claim: perhaps ours
	// with the marker edited out, perhaps not — a person decides.
	branchAhead(t, c, "edited")
	at := headOf(t, c, "edited")
	unmarked := openPR(t, c, "edited", "fix (the marker was removed)")
	obs, err = g.PullRequest(ctx, q("edited", "op-2", at))
	expect(t, "no marker, at the recorded head", obs, err, reconcilers.Ambiguous, "")
	if !strings.Contains(obs.Detail, "#"+itoa(unmarked.GetNumber())) || !strings.Contains(obs.Detail, at) {
		t.Errorf("detail %q should name the pull request and the commit", obs.Detail)
	}
	// Closed, it is just as undecidable.
	closePR(t, c, unmarked.GetNumber())
	obs, err = g.PullRequest(ctx, q("edited", "op-2", at))
	expect(t, "no marker, at the recorded head, closed", obs, err, reconcilers.Ambiguous, "")

	// Not ours: recorded at another commit, opened before the claim, or
	// another operation's (its marker); and without a recorded head only
	// the marker counts.
	obs, err = g.PullRequest(ctx, q("edited", "op-2", recorded))
	expect(t, "no marker, at another commit", obs, err, reconcilers.NotSeen, "")
	before := q("edited", "op-2", at)
	before.Since = time.Now().Add(reconcilers.ClockMargin + time.Minute)
	obs, err = g.PullRequest(ctx, before)
	expect(t, "no marker, opened before the claim", obs, err, reconcilers.NotSeen, "")
	obs, err = g.PullRequest(ctx, q("edited", "op-2", ""))
	expect(t, "no marker, no recorded head", obs, err, reconcilers.NotSeen, "")
	branchAhead(t, c, "theirs")
	openPR(t, c, "theirs", withMarker("another task's", "op-other"))
	obs, err = g.PullRequest(ctx, q("theirs", "op-3", headOf(t, c, "theirs")))
	expect(t, "another operation's marker, at the recorded head", obs, err, reconcilers.NotSeen, "")

	// The marker wins over a pull request at the recorded head without it.
	branchAhead(t, c, "both")
	both := headOf(t, c, "both")
	closePR(t, c, openPR(t, c, "both", "a person's").GetNumber())
	mine := openPR(t, c, "both", withMarker("fix", "op-4"))
	obs, err = g.PullRequest(ctx, q("both", "op-4", both))
	expect(t, "the marker beside an unmarked one at the head", obs, err, reconcilers.Found, mine.GetHTMLURL())
}

func TestBranch(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	g := reconcilers.NewGitHub(c)

	obs, err := g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: "main"})
	expect(t, "no branch", obs, err, reconcilers.NotSeen, "")

	main, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	sha := main.GetObject().GetSHA()
	if _, _, err := c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/feat"),
		Object: &github.GitObject{SHA: &sha}}); err != nil {
		t.Fatal(err)
	}
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: "main"})
	expect(t, "branch at main", obs, err, reconcilers.Found, "refs/heads/feat@"+sha)
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: sha})
	expect(t, "branch at the commit", obs, err, reconcilers.Found, "refs/heads/feat@"+sha)

	// main moves on: the branch may still be ours, or someone else's.
	if _, _, err := c.Repositories.CreateFile(ctx, "acme", "app", "moved.txt", &github.RepositoryContentFileOptions{
		Message: github.String("move"), Content: []byte("m\n"), Branch: github.String("main")}); err != nil {
		t.Fatal(err)
	}
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: "main"})
	expect(t, "branch behind a moved main", obs, err, reconcilers.Ambiguous, "")
	if !strings.Contains(obs.Detail, "someone else") || !strings.Contains(obs.Detail, sha) {
		t.Errorf("detail %q should say where the branch is and that someone else may have made it", obs.Detail)
	}
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: strings.Repeat("a", 40)})
	expect(t, "branch at another commit", obs, err, reconcilers.Ambiguous, "")
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: "gone"})
	expect(t, "from a branch that does not exist", obs, err, reconcilers.Ambiguous, "")

	addFault(t, sb.GitHub, sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: sha})
	expect(t, "a lagging ref", obs, err, reconcilers.NotSeen, "")

	addFault(t, sb.GitHub, sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultFail, Times: 1})
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: sha})
	expectCouldNotAsk(t, "git/get-ref failing", obs, err)
	// The branch is there, but resolving "main" fails: still could not ask.
	sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if !strings.HasSuffix(r.URL.Path, "/git/ref/heads/main") {
			return false
		}
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return true
	})
	obs, err = g.Branch(ctx, reconcilers.BranchQuery{Repo: acme, Branch: "feat", From: "main"})
	expectCouldNotAsk(t, "git/get-ref failing for the from branch", obs, err)
	sb.GitHub.SetFault(nil)
}

func TestFile(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	g := reconcilers.NewGitHub(c)
	q := reconcilers.FileQuery{Repo: acme, Branch: "main", Path: "docs/notes.md", Content: "hello\n"}

	obs, err := g.File(ctx, q)
	expect(t, "no file", obs, err, reconcilers.NotSeen, "")

	resp, _, err := c.Repositories.CreateFile(ctx, "acme", "app", q.Path, &github.RepositoryContentFileOptions{
		Message: github.String("notes"), Content: []byte(q.Content), Branch: github.String("main")})
	if err != nil {
		t.Fatal(err)
	}
	obs, err = g.File(ctx, q)
	expect(t, "the content is there", obs, err, reconcilers.Found, resp.GetContent().GetSHA())

	other := q
	other.Content = "goodbye\n"
	obs, err = g.File(ctx, other)
	expect(t, "other content is there", obs, err, reconcilers.NotSeen, "")
	dir := q
	dir.Path = "docs"
	obs, err = g.File(ctx, dir)
	expect(t, "a directory", obs, err, reconcilers.NotSeen, "")

	addFault(t, sb.GitHub, sandbox.FaultRule{Endpoint: "repos/get-content", Kind: sandbox.FaultFail, Status: 503, Times: 1})
	obs, err = g.File(ctx, q)
	expectCouldNotAsk(t, "repos/get-content failing", obs, err)
}

func TestComment(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	g := reconcilers.NewGitHub(c)
	issue, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("bug")})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	q := reconcilers.CommentQuery{Repo: acme, Number: issue.GetNumber(), OperationID: "op-c", Since: claimed}
	comment := func(body string) *github.IssueComment {
		t.Helper()
		cm, _, err := c.Issues.CreateComment(ctx, "acme", "app", issue.GetNumber(), &github.IssueComment{Body: github.String(body)})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}

	obs, err := g.Comment(ctx, q)
	expect(t, "no comment", obs, err, reconcilers.NotSeen, "")
	comment("a person's comment")
	comment(withMarker("another operation's", "op-other"))
	obs, err = g.Comment(ctx, q)
	expect(t, "comments without our marker", obs, err, reconcilers.NotSeen, "")

	ours := comment(withMarker("ours", "op-c"))
	obs, err = g.Comment(ctx, q)
	expect(t, "our comment", obs, err, reconcilers.Found, ours.GetHTMLURL())

	// Only comments since the claim (minus the margin) are searched.
	future := q
	future.Since = claimed.Add(time.Hour)
	obs, err = g.Comment(ctx, future)
	expect(t, "a claim after the comment", obs, err, reconcilers.NotSeen, "")

	addFault(t, sb.GitHub, sandbox.FaultRule{Endpoint: "issues/list-comments", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = g.Comment(ctx, q)
	expect(t, "a lagging list", obs, err, reconcilers.NotSeen, "")

	comment(withMarker("ours, twice", "op-c"))
	obs, err = g.Comment(ctx, q)
	expect(t, "two comments with our marker", obs, err, reconcilers.Ambiguous, "")

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "issues/list-comments", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "issues/list-comments", Kind: sandbox.FaultSecondaryRateLimit, Times: 1},
	} {
		addFault(t, sb.GitHub, rule)
		obs, err := reconcilers.NewGitHub(newGitHubClient(t, sb)).Comment(ctx, q)
		expectCouldNotAsk(t, "issues/list-comments "+string(rule.Kind), obs, err)
	}
}

func TestSlackMessage(t *testing.T) {
	sb := startSandbox(t)
	sc := newSlackClient(sb)
	ctx := context.Background()
	s := reconcilers.NewSlack(sc)
	claimed := time.Now()
	q := reconcilers.MessageQuery{Channel: "#ops", OperationID: "op-s", EventType: eventType, Since: claimed}
	post := func(opID string, withMeta bool) string {
		t.Helper()
		opts := []slack.MsgOption{slack.MsgOptionText("the answer", false)}
		if withMeta {
			opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: eventType,
				EventPayload: map[string]any{"operation_id": opID, "task_id": "T"}}))
		}
		_, ts, err := sc.PostMessageContext(ctx, "#ops", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}

	obs, err := s.Message(ctx, q)
	expect(t, "no message", obs, err, reconcilers.NotSeen, "")
	post("", false)
	post("op-other", true)
	obs, err = s.Message(ctx, q)
	expect(t, "messages that are not ours", obs, err, reconcilers.NotSeen, "")

	ts := post("op-s", true)
	obs, err = s.Message(ctx, q)
	expect(t, "our message", obs, err, reconcilers.Found, "#ops/"+ts)
	otherType := q
	otherType.EventType = "someone_elses_event"
	obs, err = s.Message(ctx, otherType)
	expect(t, "our id under another event type", obs, err, reconcilers.NotSeen, "")

	future := q
	future.Since = claimed.Add(time.Hour)
	obs, err = s.Message(ctx, future)
	expect(t, "a claim after the message", obs, err, reconcilers.NotSeen, "")

	addFault(t, sb.Slack, sandbox.FaultRule{Endpoint: "conversations.history", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = s.Message(ctx, q)
	expect(t, "a lagging history", obs, err, reconcilers.NotSeen, "")

	post("op-s", true)
	obs, err = s.Message(ctx, q)
	expect(t, "two messages with our id", obs, err, reconcilers.Ambiguous, "")

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "conversations.history", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "conversations.history", Kind: sandbox.FaultRateLimit, RetryAfter: time.Second, Times: 1},
	} {
		addFault(t, sb.Slack, rule)
		obs, err := s.Message(ctx, q)
		expectCouldNotAsk(t, "conversations.history "+string(rule.Kind), obs, err)
	}
}

// Set.Ask reads each tool's own arguments and dispatches on the kind the
// ledger records.
func TestSetAsk(t *testing.T) {
	sb := startSandbox(t)
	c := newGitHubClient(t, sb)
	ctx := context.Background()
	set := reconcilers.NewSet(c, newSlackClient(sb))
	branchAhead(t, c, "feat")
	pr := openPR(t, c, "feat", withMarker("x", "op-pr"))
	issue, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("bug")})
	if err != nil {
		t.Fatal(err)
	}
	cm, _, err := c.Issues.CreateComment(ctx, "acme", "app", issue.GetNumber(), &github.IssueComment{Body: github.String(withMarker("hi", "op-cm"))})
	if err != nil {
		t.Fatal(err)
	}
	feat, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/feat")
	if err != nil {
		t.Fatal(err)
	}
	featSHA := feat.GetObject().GetSHA()
	file, _, _, err := c.Repositories.GetContents(ctx, "acme", "app", "feat.txt", &github.RepositoryContentGetOptions{Ref: "feat"})
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := newSlackClient(sb).PostMessageContext(ctx, "C1", slack.MsgOptionText("a", false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: eventType, EventPayload: map[string]any{"operation_id": "op-slack"}}))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute)

	for _, tc := range []struct {
		kind, opID, args, channel string
		want                      reconcilers.Outcome
		externalID                string
	}{
		{reconcilers.KindPullRequest, "op-pr", `{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`, "", reconcilers.Found, pr.GetHTMLURL()},
		{reconcilers.KindPullRequest, "op-none", `{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`, "", reconcilers.NotSeen, ""},
		{reconcilers.KindBranch, "op-br", `{"repo":"acme/app","branch":"feat","from":"` + featSHA + `"}`, "", reconcilers.Found, "refs/heads/feat@" + featSHA},
		{reconcilers.KindFile, "op-f", `{"repo":"acme/app","branch":"feat","path":"feat.txt","content":"feat\n","message":"m"}`, "", reconcilers.Found, file.GetSHA()},
		{reconcilers.KindFile, "op-f2", `{"repo":"acme/app","branch":"feat","path":"feat.txt","content":"","message":"m"}`, "", reconcilers.NotSeen, ""},
		{reconcilers.KindComment, "op-cm", `{"repo":"acme/app","number":` + itoa(issue.GetNumber()) + `,"body":"hi"}`, "", reconcilers.Found, cm.GetHTMLURL()},
		{reconcilers.KindSlackPost, "op-slack", "", "C1", reconcilers.Found, "C1/" + ts},
	} {
		obs, err := set.Ask(ctx, reconcilers.Target{Kind: tc.kind, OperationID: tc.opID, Arguments: json.RawMessage(tc.args),
			Channel: tc.channel, EventType: eventType, Since: since})
		expect(t, tc.kind+" "+tc.opID, obs, err, tc.want, tc.externalID)
	}
	// The facts recorded before sending reach the pull request question.
	obs, err := set.Ask(ctx, reconcilers.Target{Kind: reconcilers.KindPullRequest, OperationID: "op-pr", Since: since,
		Arguments: json.RawMessage(`{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`),
		Facts:     json.RawMessage(`{"head_sha":"` + featSHA + `"}`)})
	expect(t, "pull request with facts", obs, err, reconcilers.Found, pr.GetHTMLURL())
	if !strings.Contains(obs.Detail, featSHA) {
		t.Errorf("detail %q does not name the recorded head %s", obs.Detail, featSHA)
	}

	for _, tc := range []struct {
		name   string
		set    *reconcilers.Set
		target reconcilers.Target
		want   error
	}{
		{"unknown kind", set, reconcilers.Target{Kind: "github_get_file", OperationID: "op"}, reconcilers.ErrNoReconciler},
		{"no Slack client", reconcilers.NewSet(c, nil), reconcilers.Target{Kind: reconcilers.KindSlackPost, OperationID: "op", Channel: "C1", EventType: eventType}, reconcilers.ErrNotConfigured},
		{"no GitHub client", reconcilers.NewSet(nil, nil), reconcilers.Target{Kind: reconcilers.KindBranch, OperationID: "op"}, reconcilers.ErrNotConfigured},
		{"no arguments", set, reconcilers.Target{Kind: reconcilers.KindPullRequest, OperationID: "op"}, reconcilers.ErrBadTarget},
		{"bad repository", set, reconcilers.Target{Kind: reconcilers.KindBranch, OperationID: "op", Arguments: json.RawMessage(`{"repo":"acme","branch":"b","from":"main"}`)}, reconcilers.ErrBadTarget},
		{"no head", set, reconcilers.Target{Kind: reconcilers.KindPullRequest, OperationID: "op", Arguments: json.RawMessage(`{"repo":"acme/app","base":"main"}`)}, reconcilers.ErrBadTarget},
		{"facts that do not decode", set, reconcilers.Target{Kind: reconcilers.KindPullRequest, OperationID: "op",
			Arguments: json.RawMessage(`{"repo":"acme/app","head":"feat","base":"main"}`), Facts: json.RawMessage(`{"head_sha":1}`)}, reconcilers.ErrBadTarget},
		{"no channel", set, reconcilers.Target{Kind: reconcilers.KindSlackPost, OperationID: "op", EventType: eventType}, reconcilers.ErrBadTarget},
		{"no operation id", set, reconcilers.Target{Kind: reconcilers.KindComment, Arguments: json.RawMessage(`{"repo":"acme/app","number":1}`)}, reconcilers.ErrBadTarget},
	} {
		before := sb.GitHub.Stats().Requests + sb.Slack.Stats().Requests
		obs, err := tc.set.Ask(ctx, tc.target)
		if !errors.Is(err, tc.want) || obs != (reconcilers.Observation{}) {
			t.Errorf("%s: %+v, %v; want an error wrapping %v", tc.name, obs, err, tc.want)
		}
		if after := sb.GitHub.Stats().Requests + sb.Slack.Stats().Requests; after != before {
			t.Errorf("%s: %d requests were sent, want none", tc.name, after-before)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The kinds Set dispatches on are the names the GitHub tools are registered
// under, which is what the ledger records as an operation's kind.
func TestKindsAreToolNames(t *testing.T) {
	names := map[string]bool{}
	for _, tool := range githubtools.Tools(nil) {
		names[tool.Name()] = true
	}
	for _, kind := range []string{reconcilers.KindPullRequest, reconcilers.KindBranch, reconcilers.KindFile, reconcilers.KindComment} {
		if !names[kind] {
			t.Errorf("kind %q is not a GitHub tool's name", kind)
		}
	}
}
