package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// prPrompt is the demo script's task: a branch, a file, a pull request.
const prPrompt = "Add a HELLO.md greeting and open a pull request."

// pullRequestPosts are the requests that reached the sandbox GitHub's
// pull-request endpoint to create one.
func pullRequestPosts(l *githubLog) []string {
	return l.matching(func(r string) bool { return strings.HasPrefix(r, "POST ") && strings.Contains(r, "/pulls ") })
}

// startApprovalTask starts the demo script with --require-approval
// github_create_pull_request and extra flags, and waits until its pull
// request awaits approval: `starter list --awaiting-approval` lists it and
// its status shows the operation awaiting_approval. It returns the task id
// and the operation.
func startApprovalTask(t *testing.T, env []string, name string, flags ...string) (string, workflows.OperationRecord) {
	t.Helper()
	taskID := fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano())
	args := append([]string{"run", "--prompt", prPrompt, "--repo", branchRepo, "--model", "openai:demo", "--id", taskID,
		"--require-approval", "github_create_pull_request"}, flags...)
	if r := runStarter(t, env, args...); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	return taskID, waitAwaitingApproval(t, env, taskID)
}

// waitAwaitingApproval waits until `starter list --awaiting-approval` lists
// taskID and its status shows an operation awaiting approval, and returns
// that operation.
func waitAwaitingApproval(t *testing.T, env []string, taskID string) workflows.OperationRecord {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for {
		if ls := runStarter(t, env, "list", "--awaiting-approval"); ls.code == 0 && strings.Contains(ls.stdout, taskID) {
			res := decodeResult(t, runStarter(t, env, "status", taskID, "--json"))
			for _, op := range res.Operations {
				if op.State == capstan.OutcomeAwaitingApproval {
					return op
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s never appeared in `starter list --awaiting-approval` with an operation awaiting approval", taskID)
		}
		<-poll.C // visibility is eventually consistent: there is no event to wait on, so poll it
	}
}

// TestApprovalSendsThePullRequestOnceApproved: with --require-approval
// github_create_pull_request the task writes its branch and file, and its
// pull request waits: no request reaches the sandbox GitHub's pull-request
// endpoint, `starter status --json` shows the operation awaiting_approval
// with its summary, the text status prints the command that approves it,
// `starter list --awaiting-approval` finds the task, and the task's Slack
// channel has exactly one message naming that command. An answer the task
// cannot take is one sentence, exit 2; `starter approve` sends the pull
// request, exactly once, and a second answer is told who approved.
func TestApprovalSendsThePullRequestOnceApproved(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	log := &githubLog{}
	sb.GitHub.SetFault(log.hook)
	env := endpointEnv(t, "e2e-approve", sb)
	startWorker(t, env)
	// The pull request's creation, once approved, is held 5 s, so that the
	// task still runs when a second answer comes.
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDelay, Delay: 5 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	taskID, op := startApprovalTask(t, env, "approve", "--slack", "#approvals")

	if got := pullRequestPosts(log); len(got) != 0 || sb.GitHub.Stats().PullRequestsCreated != 0 {
		t.Fatalf("while the pull request awaits approval, requests reached the pull-request endpoint: %q", got)
	}
	wantSummary := "pull request capstan/hello-" + taskID + " → main in " + branchRepo
	if op.Tool != "github_create_pull_request" || op.Summary != wantSummary {
		t.Errorf("operation awaiting approval = %+v, want the pull request, summary %q", op, wantSummary)
	}
	st := runStarter(t, env, "status", taskID)
	assertFits(t, "starter status", st.stdout)
	hint := regexp.MustCompile(`(?m)^  approve it: starter approve ` + regexp.QuoteMeta(taskID) + ` \\\n {6}(\S+) \\\n {6}--hash ([0-9a-f]{64})$`).FindStringSubmatch(st.stdout)
	if hint == nil || !strings.HasSuffix(op.OperationID, ":"+hint[1]) || hint[2] != op.CallHash || !strings.Contains(strings.Join(strings.Fields(st.stdout), " "), "awaiting approval: operation") {
		t.Fatalf("starter status does not say what awaits approval and how to approve it (with the call's hash %s):\n%s", op.CallHash, st.stdout)
	}
	notices := slackMessagesWith(sb.Slack.Messages("#approvals"), "starter approve "+taskID)
	if len(notices) != 1 || !strings.Contains(notices[0], wantSummary) || !strings.Contains(notices[0], "sha256 "+op.CallHash) ||
		!strings.Contains(notices[0], "title (") || !strings.Contains(notices[0], "--hash "+op.CallHash) {
		t.Errorf("Slack #approvals has %d messages naming the approve command, want 1 saying %q with the call's fields and its hash %s: %q", len(notices), wantSummary, op.CallHash, notices)
	}
	// starter show prints the whole call from the ledger, with the hash.
	if sh := runStarter(t, env, "show", taskID, hint[1]); sh.code != 0 || !strings.Contains(sh.stdout, "tool: github_create_pull_request\n") ||
		!strings.Contains(sh.stdout, "head (") || !strings.Contains(sh.stdout, "sha256 of the call: "+op.CallHash) {
		t.Errorf("starter show: exit %d, stdout %q, stderr %q; want the whole call and its hash", sh.code, sh.stdout, sh.stderr)
	}

	// Answers the task cannot take: one sentence, exit 2, nothing changed.
	branchOp := ""
	for _, o := range decodeResult(t, runStarter(t, env, "status", taskID, "--json")).Operations {
		if o.Tool == "github_create_branch" {
			branchOp = o.OperationID
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", taskID, branchOp}, "is succeeded and waits for no approval"},
		{[]string{"approve", taskID, op.OperationID}, "approve needs the sha256 of the call it approves (--hash " + op.CallHash + ")"},
		{[]string{"approve", taskID, op.OperationID, "--hash", strings.Repeat("0", 64)}, "nothing was approved"},
		{[]string{"deny", taskID, op.OperationID}, "deny needs --reason"},
		{[]string{"approve", taskID, "nope"}, `has no operation "nope"`},
		{[]string{"approve", "no-such-task-" + taskID, op.OperationID}, "no running task"},
	} {
		r := runStarter(t, env, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}

	if r := runStarter(t, env, "approve", taskID, hint[1], "--hash", hint[2], "--note", "ship it", "--as", "alice"); r.code != 0 ||
		!strings.Contains(r.stdout, "operation "+op.OperationID+" approved by alice: "+wantSummary) {
		t.Fatalf("approve: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runStarter(t, env, "deny", taskID, hint[1], "--reason", "too late", "--as", "bob"); r.code != 2 || !strings.Contains(r.stderr, "already approved by alice") {
		t.Errorf("a deny after the approval: exit %d, stderr %q; want refused as already approved by alice", r.code, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	recordHistory(t, "approved", workflows.WorkflowID(taskID))
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 || st.BranchesCreated != 1 || st.FilesWritten != 1 || len(pullRequestPosts(log)) != 1 {
		t.Errorf("github stats = %+v, pull-request posts %d; want exactly 1 branch, 1 file, 1 pull request", st, len(pullRequestPosts(log)))
	}
	for _, o := range res.Operations {
		if o.OperationID == op.OperationID && (o.State != capstan.OutcomeSucceeded || o.Approval == nil || o.Approval.By != "alice" || o.Approval.Note != "ship it" ||
			o.Approval.Hash != op.CallHash || !strings.Contains(o.Approval.Client, "@")) {
			t.Errorf("the pull request's operation = %+v, approval %+v; want succeeded, approved by alice with the call's hash and her client's identity", o, o.Approval)
		}
	}
	if n := len(slackMessagesWith(sb.Slack.Messages("#approvals"), "starter approve")); n != 1 || len(res.Notices) != 1 || res.Notices[0].State != capstan.OutcomeSucceeded {
		t.Errorf("after the task: %d Slack messages name the approve command, notices %+v; want one, delivered", n, res.Notices)
	}
}

// slackMessagesWith are the texts of msgs that contain s.
func slackMessagesWith(msgs []sandbox.SlackMessage, s string) []string {
	var out []string
	for _, m := range msgs {
		if strings.Contains(m.Text, s) {
			out = append(out, m.Text)
		}
	}
	return out
}

// TestApprovalSurvivesAWorkerKilledRightAfterIt: the worker is killed
// (SIGKILL) the moment `starter approve` returns — the approval is in the
// task's history and its ExecuteTool scheduled — and a second worker
// takes the task over: exactly one pull request. GitHub holds its answer
// to the pull request's creation 4 s after acting, so that when the killed
// worker had sent it, the kill lands while the call is in flight and the
// second worker finds the operation running in the ledger (then it is
// reconciled, never sent again); when it had not, the second sends it.
func TestApprovalSurvivesAWorkerKilledRightAfterIt(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDelay, Delay: 4 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, "e2e-approve-kill", sb), "CAPSTAN_HEARTBEAT_TIMEOUT=3s", "CAPSTAN_RECONCILE_WINDOW=2s")
	w := startWorker(t, env)
	taskID, op := startApprovalTask(t, env, "approve-kill")
	if n := sb.GitHub.Stats().PullRequestsCreated; n != 0 {
		t.Fatalf("pull requests before the approval = %d, want 0", n)
	}
	if r := runStarter(t, env, "approve", taskID, op.OperationID, "--hash", op.CallHash); r.code != 0 {
		t.Fatalf("approve: exit %d, stderr %q", r.code, r.stderr)
	}
	w.stop(t, syscall.SIGKILL, 10*time.Second)
	startWorker(t, env)
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 {
		t.Errorf("github stats = %+v, want exactly 1 pull request", st)
	}
	for _, o := range res.Operations {
		if o.OperationID == op.OperationID {
			if o.State != capstan.OutcomeSucceeded {
				t.Errorf("the pull request's operation = %+v, want succeeded", o)
			}
			t.Logf("the pull request's operation: %s, recovered %t (%s)", o.State, o.Recovered, o.Reason)
		}
	}
}

// TestDenialAndTimeoutSendNothing: `starter deny --reason` sends nothing,
// the operation is denied, the model's next request carries the reason as
// the tool's result, and the task goes on to its end; with a short
// --approval-timeout and nobody answering, the operation is denied with
// the timeout's reason. No pull request either way.
func TestDenialAndTimeoutSendNothing(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	log := &githubLog{}
	sb.GitHub.SetFault(log.hook)
	env := endpointEnv(t, "e2e-deny", sb)
	startWorker(t, env)

	taskID, op := startApprovalTask(t, env, "deny")
	reason := "no pull requests during the freeze " + taskID
	// Named without its chain scope, as a person types it: the replay test
	// replays the recorded history under the replayer's own namespace,
	// where the scope (a hash of namespace and run) differs, so an update
	// naming the scoped id would match nothing there.
	short := regexp.MustCompile(`^.*:~[0-9a-f]{12}:`).ReplaceAllString(op.OperationID, "")
	if r := runStarter(t, env, "deny", taskID, short, "--reason", reason, "--as", "bob"); r.code != 0 ||
		!strings.Contains(r.stdout, "denied by bob") {
		t.Fatalf("deny: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	tools := toolMessages(t, sb.Model.LastRequest())
	if len(tools) != 3 || !strings.Contains(tools[2], "github_create_pull_request was denied by bob: "+reason) {
		t.Errorf("the model's last request has tool messages %q, want the third to carry bob's denial", tools)
	}
	if d := deniedOp(res, op.OperationID); d == nil || d.Reason != "denied by bob: "+reason || d.PolicyRule != "" {
		t.Errorf("operation = %+v, want denied by bob with the reason, no policy rule", d)
	}
	recordHistory(t, "denied", workflows.WorkflowID(taskID))

	timedOut, op2 := startApprovalTask(t, env, "approval-timeout", "--approval-timeout", "20s")
	res = waitResult(t, timedOut)
	if d := deniedOp(res, op2.OperationID); res.Status != workflows.StatusCompleted || d == nil || d.Reason != "denied: no approval within 20s" {
		t.Errorf("task %s ended %s, operation %+v; want completed, the pull request denied: no approval within 20s", timedOut, res.Status, d)
	}
	if got := pullRequestPosts(log); len(got) != 0 || sb.GitHub.Stats().PullRequestsCreated != 0 {
		t.Errorf("requests reached the pull-request endpoint: %q; want none", got)
	}
	// Nothing waits any more: the search attribute is cleared.
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for {
		ls := runStarter(t, env, "list", "--awaiting-approval")
		if ls.code == 0 && !strings.Contains(ls.stdout, taskID) && !strings.Contains(ls.stdout, timedOut) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("`starter list --awaiting-approval` still lists the ended tasks:\n%s", ls.stdout)
		}
		<-poll.C // visibility is eventually consistent: poll it
	}
}

// deniedOp is the operation id of res when it is denied, else nil.
func deniedOp(res workflows.TaskResult, id string) *workflows.OperationRecord {
	for i, op := range res.Operations {
		if op.OperationID == id && op.State == capstan.OutcomeDenied {
			return &res.Operations[i]
		}
	}
	return nil
}
