package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestPersonResolvesWhatNobodyCanTell drives the person-in-the-loop path
// with the real binaries: GitHub opens the pull request but the answer is
// lost, and the reconciler cannot list pull requests, so nobody can tell.
// The task waits for a person; `starter list --needs-human` shows it; bad
// `starter resolve` input is refused and changes nothing; `--found URL`
// settles the operation, the task completes, and the model's next turn is
// told the operation was recovered. Nothing is sent twice.
func TestPersonResolvesWhatNobodyCanTell(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail}, // every time: the reconciler cannot ask
	} {
		if err := sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	env := append(endpointEnv(t, "e2e-person", sb), "CAPSTAN_RECONCILE_WINDOW=2s")
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-person-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	opID := waitNeedsHuman(t, env, taskID)
	// The status names the operation by its label and prints the command
	// to run one argument a line (backslash-continued), with an ending of
	// the operation id that `resolve` expands, so that it fits 100 columns
	// and pastes as one command.
	st := runStarter(t, env, "status", taskID)
	if words := strings.Join(strings.Fields(st.stdout), " "); st.code != 0 ||
		!strings.Contains(words, "needs a person: operation github_create_pull_request capstan-sandbox/demo capstan/hello-"+taskID+" main: ") {
		t.Errorf("starter status: exit %d, stdout:\n%s\nwant it to say which operation needs a person", st.code, st.stdout)
	}
	assertFits(t, "starter status", st.stdout)
	hint := regexp.MustCompile(`(?m)^  resolve it: starter resolve ` + regexp.QuoteMeta(taskID) + ` \\\n {6}(\S+) \\\n {6}--found URL \| --absent \| --abort$`).FindStringSubmatch(st.stdout)
	if hint == nil || !strings.HasSuffix(opID, ":"+hint[1]) {
		t.Fatalf("starter status does not print how to resolve %s:\n%s", opID, st.stdout)
	}
	shortOp := hint[1]

	// Bad input is one clear sentence, exit 2, and changes nothing.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{taskID, opID}, "exactly one of --found URL, --absent or --abort"},
		{[]string{taskID, opID, "--found", "github.com/pr/1"}, "needs the http(s) URL"},
		{[]string{taskID, opID, "--absent", "--abort"}, "exactly one of"},
		{[]string{taskID, "default:" + taskID + ":nope", "--absent"}, "has no operation"},
		{[]string{"no-such-task-" + taskID, opID, "--absent"}, "no running task"},
	} {
		r := runStarter(t, env, append([]string{"resolve"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("resolve %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if got := waitNeedsHuman(t, env, taskID); got != opID {
		t.Fatalf("after refused resolutions the task waits for %s, want still %s", got, opID)
	}

	prs := sb.GitHub.PullRequests("capstan-sandbox/demo")
	if len(prs) != 1 {
		t.Fatalf("pull requests = %d, want the 1 whose answer was lost", len(prs))
	}
	url := fmt.Sprintf("%s/capstan-sandbox/demo/pull/%d", strings.TrimRight(sb.GitHubURL, "/"), prs[0].Number)
	if r := runStarter(t, env, "resolve", taskID, shortOp, "--found", url); r.code != 0 || !strings.Contains(r.stdout, "operation "+opID+" resolved as found") {
		t.Fatalf("resolve --found: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	recordHistory(t, "person-resolves", workflows.WorkflowID(taskID))
	var pr *workflows.OperationRecord
	for i, op := range res.Operations {
		if op.OperationID == opID {
			pr = &res.Operations[i]
		}
	}
	if pr == nil || pr.State != capstan.OutcomeSucceeded || !pr.Recovered || pr.ExternalID != url {
		t.Fatalf("pull request operation = %+v, want SUCCEEDED, recovered, at %s", pr, url)
	}
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 || st.BranchesCreated != 1 || st.FilesWritten != 1 {
		t.Errorf("github stats = %+v, want exactly 1 branch, 1 file, 1 pull request", st)
	}
	// The model's next turn was told: the tool message for the pull
	// request says it was recovered by a person.
	var raw struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(sb.Model.LastRequest(), &raw); err != nil {
		t.Fatal(err)
	}
	told := false
	for _, m := range raw.Messages {
		if m["role"] == "tool" && strings.Contains(fmt.Sprint(m["content"]), "recovered") && strings.Contains(fmt.Sprint(m["content"]), url) {
			told = true
		}
	}
	if !told {
		t.Errorf("the model's last request has no tool message saying the pull request was recovered at %s:\n%s", url, sb.Model.LastRequest())
	}
}

// waitNeedsHuman waits until `starter list --needs-human` lists taskID and
// its status names the operation that waits, and returns that operation.
func waitNeedsHuman(t *testing.T, env []string, taskID string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for {
		ls := runStarter(t, env, "list", "--needs-human")
		if ls.code == 0 && strings.Contains(ls.stdout, taskID) {
			st := runStarter(t, env, "status", taskID, "--json")
			res := decodeResult(t, st)
			if res.Status == workflows.StatusNeedsHuman {
				for _, op := range res.Operations {
					if op.State == capstan.OutcomeNeedsHuman {
						return op.OperationID
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s never appeared in `starter list --needs-human` waiting on an operation", taskID)
		}
		<-poll.C // visibility is eventually consistent: there is no event to wait on, so poll it
	}
}

// waitResult waits for the task's workflow to close and returns its result.
func waitResult(t *testing.T, taskID string) workflows.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := temporal.GetWorkflow(ctx, workflows.WorkflowID(taskID), "")
	var res workflows.TaskResult
	err := run.Get(ctx, &res)
	if err != nil {
		desc, derr := describe(ctx, workflows.WorkflowID(taskID))
		if derr == nil && desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Fatalf("task %s ended %s: %v", taskID, desc.GetWorkflowExecutionInfo().GetStatus(), err)
		}
		t.Fatalf("task %s: %v", taskID, err)
	}
	return res
}
