package reconcilers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// Wired as the worker wires it — the GitHub tools' registry and the Slack
// deliveries — a set reaches each built-in lookup by the kind the ledger
// records, with the arguments the tool was called with (or, for a Slack
// delivery, its channel), against the sandbox on loopback.
func TestBuiltInLookups(t *testing.T) {
	t.Parallel()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	c, err := githubtools.NewClient(sb.GitHubURL, "test-token", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sc := slack.New("xoxb-test", slack.OptionAPIURL(sb.SlackURL))
	set := reconcilers.NewSet(tool.NewRegistry(githubtools.Tools(c)...), slackpost.NewMessages(sc))
	ctx := context.Background()
	marked := func(body, opID string) *string { return github.String(body + "\n\n" + githubtools.Marker(opID)) }

	main, _, err := c.Git.GetRef(ctx, "acme", "app", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	sha := main.GetObject().GetSHA()
	for _, branch := range []string{"feat", "plain"} {
		if _, _, err := c.Git.CreateRef(ctx, "acme", "app", &github.Reference{Ref: github.String("refs/heads/" + branch),
			Object: &github.GitObject{SHA: &sha}}); err != nil {
			t.Fatal(err)
		}
	}
	file, _, err := c.Repositories.CreateFile(ctx, "acme", "app", "feat.txt", &github.RepositoryContentFileOptions{
		Message: github.String("work"), Content: []byte("feat\n"), Branch: github.String("feat")})
	if err != nil {
		t.Fatal(err)
	}
	pr, _, err := c.PullRequests.Create(ctx, "acme", "app", &github.NewPullRequest{Title: github.String("t"),
		Head: github.String("feat"), Base: github.String("main"), Body: marked("b", "op-pr")})
	if err != nil {
		t.Fatal(err)
	}
	issue, _, err := c.Issues.Create(ctx, "acme", "app", &github.IssueRequest{Title: github.String("bug")})
	if err != nil {
		t.Fatal(err)
	}
	cm, _, err := c.Issues.CreateComment(ctx, "acme", "app", issue.GetNumber(), &github.IssueComment{Body: marked("hi", "op-cm")})
	if err != nil {
		t.Fatal(err)
	}
	channel, ts, err := sc.PostMessageContext(ctx, "#deliveries", slack.MsgOptionText("a", false), slack.MsgOptionMetadata(slackpost.Metadata("op-slack", "T")))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute)

	for _, tc := range []struct {
		kind, opID string
		args       json.RawMessage
		externalID string
	}{
		{githubtools.NameCreatePullRequest, "op-pr", json.RawMessage(`{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`), pr.GetHTMLURL()},
		{githubtools.NameCreateBranch, "op-br", json.RawMessage(`{"repo":"acme/app","branch":"plain","from":"main"}`), "refs/heads/plain@" + sha},
		{githubtools.NamePutFile, "op-f", json.RawMessage(`{"repo":"acme/app","branch":"feat","path":"feat.txt","content":"feat\n","message":"m"}`), file.GetContent().GetSHA()},
		{githubtools.NameComment, "op-cm", ghref.CommentArguments("acme/app", issue.GetNumber(), "hi"), cm.GetHTMLURL()},
		{slackpost.Kind, "op-slack", slackpost.Arguments("#deliveries"), channel + "/" + ts},
	} {
		ans, err := set.Reconcile(ctx, reconcilers.Question{Kind: tc.kind,
			Sent:     tool.Sent{Call: tool.Call{OperationID: tc.opID, Arguments: tc.args}, Since: since},
			Deadline: time.Now().Add(time.Minute), Window: time.Minute},
			reconcilers.Pace{Now: time.Now, Backoff: func(int) time.Duration { return time.Millisecond }})
		if err != nil || ans.State != capstan.OutcomeSucceeded || ans.ExternalID != tc.externalID || ans.Asked != 1 || ans.Key == "" {
			t.Errorf("%s: %+v, %v; want SUCCEEDED %q after one question", tc.kind, ans, err, tc.externalID)
		}
	}
	if _, err := set.Effect(githubtools.NameGetFile, tool.Sent{Call: tool.Call{OperationID: "op", Arguments: json.RawMessage(`{"repo":"acme/app","path":"x"}`)}}); err == nil {
		t.Error("a read-only tool has a lookup")
	}
}
