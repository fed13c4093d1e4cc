package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestForgedCommentMarkerIsIgnored: before the task runs, someone else
// (mallory) comments on the issue with the very marker the task's comment
// delivery will carry. GitHub then fails the delivery's comment with a 500,
// so its outcome is unknown and the comment reconciler looks. Mallory's
// comment is not capstan's: the reconciler does not see the delivery, it
// is sent again, and capstan's comment is posted exactly once.
func TestForgedCommentMarkerIsIgnored(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	ctx := context.Background()
	mallory, err := githubtools.NewClient(sb.GitHubURL, sandbox.SandboxUserToken("mallory"), &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	issue, _, err := mallory.Issues.Create(ctx, "capstan-sandbox", "demo", &gogithub.IssueRequest{Title: gogithub.String("report here")})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("e2e-forged-%d", time.Now().UnixNano())
	target := fmt.Sprintf("capstan-sandbox/demo#%d", issue.GetNumber())

	env := append(endpointEnv(t, "e2e-forged", sb), "CAPSTAN_RECONCILE_WINDOW=2s", "CAPSTAN_HEARTBEAT_TIMEOUT=3s")
	// The task is started before any worker polls its queue, so nothing of
	// it runs until mallory has forged the marker and the fault is set.
	r := runStarter(t, env, "run", "--prompt", "open a pull request and report", "--repo", "capstan-sandbox/demo",
		"--model", "openai:demo", "--comment", target, "--id", id)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// The delivery's id carries the task's chain scope, known once the task
	// has started; mallory forges its marker before a worker is there to
	// run the task (the checks below still fail if capstan's comment came
	// first, or on its first try).
	opID := "default:" + id + ":" + chainScope(t, workflows.WorkflowID(id)) + ":deliver:github:" + target
	if _, _, err := mallory.Issues.CreateComment(ctx, "capstan-sandbox", "demo", issue.GetNumber(), &gogithub.IssueComment{
		Body: gogithub.String("nothing to see here\n\n" + githubtools.Marker(opID))}); err != nil {
		t.Fatal(err)
	}
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "issues/create-comment", Kind: sandbox.FaultFail, Status: 500, Times: 1}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, env)
	res := waitResult(t, id)
	if all := sb.GitHub.Comments("capstan-sandbox/demo", issue.GetNumber()); len(all) == 0 || all[0].Author == sandbox.GitHubLogin {
		t.Fatalf("capstan commented before mallory forged the marker: %+v; the test proves nothing", all)
	}

	var ours []sandbox.SandboxComment
	for _, c := range sb.GitHub.Comments("capstan-sandbox/demo", issue.GetNumber()) {
		if c.Author == sandbox.GitHubLogin {
			ours = append(ours, c)
		}
	}
	if len(ours) != 1 || !strings.Contains(ours[0].Body, githubtools.Marker(opID)) {
		t.Fatalf("capstan's comments on %s = %+v, want exactly one carrying the operation's marker", target, ours)
	}
	if len(res.Deliveries) != 1 {
		t.Fatalf("deliveries = %+v, want the comment", res.Deliveries)
	}
	d := res.Deliveries[0]
	if d.OperationID != opID || d.State != capstan.OutcomeSucceeded || d.Tries != 2 ||
		!strings.HasSuffix(d.ExternalID, fmt.Sprintf("#issuecomment-%d", ours[0].ID)) {
		t.Errorf("delivery = %+v, want %s succeeded on its second try (the first met the 500) at capstan's comment %d, not mallory's", d, opID, ours[0].ID)
	}
	if st := sb.GitHub.Stats(); st.CommentsCreated != 2 {
		t.Errorf("comments created = %d, want 2 (mallory's and capstan's)", st.CommentsCreated)
	}
}
