package github_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// settle forms the effect of a call of the tool name and settles it by
// sending it again, as a reconciler does after a lookup saw nothing.
func (f *lookupFixture) settle(t *testing.T, name string, s tool.Sent) (tool.Observation, error) {
	t.Helper()
	impl, err := tool.NewRegistry(githubtools.Tools(newClient(t, f.url))...).Get(name)
	if err != nil {
		t.Fatal(err)
	}
	effect, err := impl.(tool.Finder).Effect(s)
	if err != nil {
		t.Fatal(err)
	}
	settler, ok := effect.(tool.Settler)
	if !ok {
		t.Fatalf("the effect of %s is not a tool.Settler", name)
	}
	return settler.Settle(context.Background())
}

// A pull request the first send did not open is opened by the re-send,
// with the marker; one it did open, hidden by a lagging list, is refused
// (422) and read back as found; someone else's open pull request refuses
// the re-send and is not the operation's: an error, the window goes on.
func TestPullRequestSettle(t *testing.T) {
	f := newLookupFixture(t)
	f.branchAhead(t, "feat")
	obs, err := f.settle(t, githubtools.NameCreatePullRequest, sent("op-1", prArgs("feat")))
	prs := f.sb.PullRequests("acme/app")
	if len(prs) != 1 {
		t.Fatalf("pull requests after the re-send = %d, want 1", len(prs))
	}
	expect(t, "re-sent, absent before", obs, err, tool.Found, obs.ExternalID)
	if !strings.HasSuffix(obs.ExternalID, "/pull/1") || !strings.Contains(prs[0].Body, githubtools.Marker("op-1")) {
		t.Errorf("found %q, body %q; want pull 1 carrying op-1's marker", obs.ExternalID, prs[0].Body)
	}

	// The first send opened it; the re-send is refused and read back.
	f.branchAhead(t, "lagged")
	ours := f.openPR(t, "lagged", withMarker("b", "op-2"))
	obs, err = f.settle(t, githubtools.NameCreatePullRequest, sent("op-2", prArgs("lagged")))
	expect(t, "refused, ours", obs, err, tool.Found, ours.GetHTMLURL())
	if !strings.Contains(obs.Detail, "422") {
		t.Errorf("detail %q does not say the re-send was refused", obs.Detail)
	}
	// Refused, and the read-back list lags: nothing settled.
	f.branchAhead(t, "slow")
	f.openPR(t, "slow", withMarker("b", "op-3"))
	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1})
	obs, err = f.settle(t, githubtools.NameCreatePullRequest, sent("op-3", prArgs("slow")))
	expectCouldNotAsk(t, "refused, the list lags", obs, err)
	// Someone else's open pull request: refused, not ours.
	f.branchAhead(t, "theirs")
	f.openPR(t, "theirs", "a person's")
	obs, err = f.settle(t, githubtools.NameCreatePullRequest, sent("op-4", prArgs("theirs")))
	expectCouldNotAsk(t, "refused, someone else's", obs, err)
	// A 502 before acting: nothing settled, nothing opened.
	f.branchAhead(t, "down")
	addFault(t, f.sb, sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultFail, Status: 502, Times: 1})
	obs, err = f.settle(t, githubtools.NameCreatePullRequest, sent("op-5", prArgs("down")))
	expectCouldNotAsk(t, "re-send 502", obs, err)
	if n := len(f.sb.PullRequests("acme/app")); n != 4 {
		t.Errorf("pull requests = %d, want 4: no re-send made a second one", n)
	}
}

// A branch is created again at the commit recorded at send; one that
// exists is refused (422 Reference already exists) and read back: at the
// recorded commit found, elsewhere ambiguous. Without a recorded commit
// nothing is sent.
func TestBranchSettle(t *testing.T) {
	f := newLookupFixture(t)
	ctx := context.Background()
	main := f.headOf(t, "main")
	facts, _ := json.Marshal(githubtools.BranchFacts{FromSHA: main})
	withFacts := func(opID, branch string) tool.Sent {
		s := sent(opID, `{"repo":"acme/app","branch":"`+branch+`","from":"main"}`)
		s.Facts = facts
		return s
	}
	obs, err := f.settle(t, githubtools.NameCreateBranch, withFacts("op-1", "feat"))
	expect(t, "created again", obs, err, tool.Found, "refs/heads/feat@"+main)
	if got := f.headOf(t, "feat"); got != main {
		t.Errorf("feat at %s, want %s", got, main)
	}
	obs, err = f.settle(t, githubtools.NameCreateBranch, withFacts("op-1", "feat"))
	expect(t, "refused, at the recorded commit", obs, err, tool.Found, "refs/heads/feat@"+main)
	if !strings.Contains(obs.Detail, "Reference already exists") {
		t.Errorf("detail %q does not say the re-send was refused", obs.Detail)
	}

	f.branchAhead(t, "moved") // at a commit past main
	obs, err = f.settle(t, githubtools.NameCreateBranch, withFacts("op-2", "moved"))
	expect(t, "refused, at another commit", obs, err, tool.Ambiguous, "")

	obs, err = f.settle(t, githubtools.NameCreateBranch, sent("op-3", `{"repo":"acme/app","branch":"bare","from":"main"}`))
	expectCouldNotAsk(t, "no commit recorded", obs, err)
	if _, _, err := f.c.Git.GetRef(ctx, "acme", "app", "heads/bare"); err == nil {
		t.Error("a branch was created without a recorded commit")
	}
}
