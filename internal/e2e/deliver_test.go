package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
)

// TestDeliveriesToSlackAndAComment: the final answer goes to Slack and, as
// a comment, to the pull request the task opened. GitHub posts the comment
// but its answer is lost; the comment reconciler finds it by its marker and
// the delivery is acked as recovered. Exactly one message and one comment.
func TestDeliveriesToSlackAndAComment(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "issues/create-comment", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, "e2e-deliver", sb), "CAPSTAN_RECONCILE_WINDOW=2s", "CAPSTAN_HEARTBEAT_TIMEOUT=3s")
	startWorker(t, env)
	id := fmt.Sprintf("e2e-deliver-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "open a pull request and report", "--repo", "capstan-sandbox/demo",
		"--model", "openai:demo", "--slack", "#capstan-e2e", "--comment", "capstan-sandbox/demo#1", "--id", id, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if len(res.Deliveries) != 2 {
		t.Fatalf("deliveries = %+v, want Slack and the comment", res.Deliveries)
	}
	slackD, commentD := res.Deliveries[0], res.Deliveries[1]
	if slackD.Target != "slack:#capstan-e2e" || slackD.State != capstan.OutcomeSucceeded || slackD.Recovered {
		t.Errorf("slack delivery = %+v, want acked at once", slackD)
	}
	if commentD.Target != "github:capstan-sandbox/demo#1" || commentD.State != capstan.OutcomeSucceeded || !commentD.Recovered ||
		!strings.Contains(commentD.ExternalID, "/pull/1#issuecomment-") || commentD.OperationID != "default:"+id+":"+chainScope(t, res.WorkflowID)+":deliver:github:capstan-sandbox/demo#1" {
		t.Errorf("comment delivery = %+v, want acked as recovered at the pull request's comment", commentD)
	}
	if n := len(sb.GitHub.Comments("capstan-sandbox/demo", 1)); n != 1 {
		t.Errorf("comments on the pull request = %d, want 1", n)
	}
	if st := sb.Slack.Stats(); st.MessagesPosted != 1 {
		t.Errorf("slack messages = %d, want 1", st.MessagesPosted)
	}
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 {
		t.Errorf("pull requests = %d, want 1", st.PullRequestsCreated)
	}
}
