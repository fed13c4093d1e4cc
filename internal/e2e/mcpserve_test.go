package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/workflows"
)

// mcpClientName is the name the test's MCP client gives in its clientInfo:
// the identity an approval through `starter mcp serve` is recorded under.
const mcpClientName = "e2e-assistant"

// serveMCP runs the starter binary as `starter mcp serve args…` and
// connects to it over its stdio, as an MCP client configured with it in
// mcpServers would; the session closes (and the process ends) with the
// test.
func serveMCP(t *testing.T, env []string, args ...string) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(starterBin, append([]string{"mcp", "serve"}, args...)...)
	cmd.Env = env
	var stderr syncBuffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: mcpClientName, Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to starter mcp serve: %v (stderr %q)", err, stderr.String())
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("starter mcp serve %v stderr:\n%s", args, stderr.String())
		}
	})
	return cs
}

// mcpCall calls the tool and decodes its structured content into out;
// a tool error fails the test.
func mcpCall(t *testing.T, cs *sdk.ClientSession, impl string, args map[string]any, out any) string {
	t.Helper()
	res, text := mcpCallRaw(t, cs, impl, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error %q", impl, args, text)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured content %s: %v", impl, b, err)
	}
	return text
}

func mcpCallRaw(t *testing.T, cs *sdk.ClientSession, impl string, args map[string]any) (*sdk.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: impl, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", impl, args, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "")
}

// mcpTools are the names of the tools the server offers, sorted.
func mcpTools(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, impl := range res.Tools {
		names = append(names, impl.Name)
	}
	slices.Sort(names)
	return names
}

// listedTask is a row of list_tasks, as the test reads it.
type listedTask struct {
	TaskID string `json:"task_id"`
	Status string `json:"status"`
	Repo   string `json:"repo"`
}

// mcpPollStatus polls task_status until done says the task is where the
// test waits for it, and returns that status. Through MCP the status is
// all a client has to follow a task by, so it is polled.
func mcpPollStatus(t *testing.T, cs *sdk.ClientSession, taskID, what string, done func(workflows.TaskResult) bool) workflows.TaskResult {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	poll := time.NewTicker(300 * time.Millisecond)
	defer poll.Stop()
	for {
		var res workflows.TaskResult
		mcpCall(t, cs, "task_status", map[string]any{"task_id": taskID}, &res)
		if done(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: task_status never showed %s; last %+v", taskID, what, res)
		}
		<-poll.C // a task's progress has no event an MCP client can wait on: poll it
	}
}

// TestMCPServeRunsFollowsAndApprovesTasks: an MCP client spawns the real
// `starter mcp serve` over stdio, hands it the demo task with run_task and
// follows it with task_status to its end (a real worker, the sandbox's
// GitHub and model); list_tasks lists it. Bad input is the tool error
// `starter run` prints, nothing started, and a task id is never reused for
// other arguments.
// Without --allow-approve the server offers no approve or deny; with it, a
// pull request awaiting approval is approved through approve_task, sent
// once, and recorded as approved by mcp:<the client's name>; another
// connection's approve_task of that task is refused.
func TestMCPServeRunsFollowsAndApprovesTasks(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-mcp-serve", sb)
	startWorker(t, env)

	plain := serveMCP(t, env)
	if got, want := mcpTools(t, plain), []string{"list_tasks", "run_task", "task_status"}; !slices.Equal(got, want) {
		t.Fatalf("starter mcp serve offers %v, want %v: no approve or deny without --allow-approve", got, want)
	}
	approving := serveMCP(t, env, "--allow-approve")
	if got := mcpTools(t, approving); !slices.Contains(got, "approve_task") || !slices.Contains(got, "deny_task") {
		t.Fatalf("starter mcp serve --allow-approve offers %v, want approve_task and deny_task too", got)
	}

	// Both tasks run at once: the plain one, and one whose pull request
	// waits for approval.
	stamp := time.Now().UnixNano()
	plainID, approvalID := fmt.Sprintf("e2e-mcp-run-%d", stamp), fmt.Sprintf("e2e-mcp-approve-%d", stamp)
	var started struct {
		TaskID     string `json:"task_id"`
		WorkflowID string `json:"workflow_id"`
	}
	text := mcpCall(t, plain, "run_task", map[string]any{"prompt": prPrompt, "repo": branchRepo, "model": "openai:demo", "id": plainID}, &started)
	if started.TaskID != plainID || started.WorkflowID != workflows.WorkflowID(plainID) || !strings.HasPrefix(text, "started task "+plainID+"\n") {
		t.Fatalf("run_task answered %+v, %q", started, text)
	}
	mcpCall(t, approving, "run_task", map[string]any{"prompt": prPrompt, "repo": branchRepo, "model": "openai:demo", "id": approvalID,
		"require_approval": []string{"github_create_pull_request"}}, &started)

	// Refused as `starter run` refuses: the same sentence, nothing started.
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"prompt": prPrompt, "max_turns": 5000}, "--max-turns 5000 is out of range (1 to 1000)"},
		// Running with other arguments, or already ran: never started again.
		{map[string]any{"prompt": prPrompt + " (another)", "repo": branchRepo, "model": "openai:demo", "id": plainID}, "task " + plainID + " is running with another --prompt"},
	} {
		res, text := mcpCallRaw(t, plain, "run_task", tc.args)
		if strings.Contains(text, "already ran") {
			tc.want = "task " + plainID + " already ran"
		}
		if !res.IsError || !strings.HasPrefix(text, tc.want) || strings.Contains(text, "\n") {
			t.Errorf("run_task %v: isError %t, %q; want one sentence beginning %q", tc.args, res.IsError, text, tc.want)
		}
	}

	res := mcpPollStatus(t, plain, plainID, "completed", func(r workflows.TaskResult) bool { return r.Status != workflows.StatusRunning })
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 3 || res.FinalText == "" {
		t.Fatalf("task %s ended %s (%s: %s) with %d operations", plainID, res.Status, res.FailureCode, res.Message, len(res.Operations))
	}
	listed := func(id string) bool {
		var list struct {
			Tasks []listedTask `json:"tasks"`
		}
		mcpCall(t, plain, "list_tasks", map[string]any{}, &list)
		return slices.Contains(list.Tasks, listedTask{TaskID: id, Status: string(workflows.StatusCompleted), Repo: branchRepo})
	}
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(300 * time.Millisecond)
	defer poll.Stop()
	for !listed(plainID) {
		if time.Now().After(deadline) {
			t.Fatalf("list_tasks never listed %s as completed", plainID)
		}
		<-poll.C // visibility is eventually consistent: poll it
	}

	// The approval, through the server started with --allow-approve.
	res = mcpPollStatus(t, approving, approvalID, "an operation awaiting approval", func(r workflows.TaskResult) bool {
		return slices.ContainsFunc(r.Operations, func(op workflows.OperationRecord) bool { return op.State == capstan.OutcomeAwaitingApproval })
	})
	if n := sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Fatalf("pull requests before the approval = %d, want 1 (the plain task's)", n)
	}
	var opID, hash string
	for _, op := range res.Operations {
		if op.State == capstan.OutcomeAwaitingApproval {
			opID, hash = op.OperationID, op.CallHash
		}
	}
	// Another connection, even of the same client, answers only for the
	// tasks it started.
	other := serveMCP(t, env, "--allow-approve")
	if res, text := mcpCallRaw(t, other, "approve_task", map[string]any{"task_id": approvalID, "operation_id": opID}); !res.IsError ||
		!strings.HasPrefix(text, "task "+approvalID+" was not started by run_task on this MCP connection") {
		t.Errorf("approve_task from another connection: isError %t, %q; want refused", res.IsError, text)
	}
	var answer workflows.ApprovalResult
	mcpCall(t, approving, "approve_task", map[string]any{"task_id": approvalID, "operation_id": opID, "note": "from the assistant", "hash": hash}, &answer)
	want := "mcp:" + mcpClientName
	if answer.Decision != workflows.DecisionApproved || answer.By != want || answer.OperationID != opID {
		t.Errorf("approve_task answered %+v, want approved by %s", answer, want)
	}
	res = mcpPollStatus(t, approving, approvalID, "the task's end", func(r workflows.TaskResult) bool { return r.Status != workflows.StatusRunning })
	_, statusText := mcpCallRaw(t, approving, "task_status", map[string]any{"task_id": approvalID})
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", approvalID, res.Status, res.FailureCode, res.Message)
	}
	for _, op := range res.Operations {
		if op.OperationID == opID && (op.State != capstan.OutcomeSucceeded || op.Approval == nil || op.Approval.By != want || op.Approval.Note != "from the assistant") {
			t.Errorf("the pull request's operation = %+v, approval %+v; want succeeded, approved by %s", op, op.Approval, want)
		}
	}
	if words := strings.Join(strings.Fields(statusText), " "); !strings.Contains(words, " by "+want+": from the assistant") {
		t.Errorf("task_status's text does not say who approved:\n%s", statusText)
	}
	if n := sb.GitHub.Stats().PullRequestsCreated; n != 2 {
		t.Errorf("pull requests = %d, want 2: one per task, the approved one once", n)
	}
}

// TestWorkerRefusesCapstansOwnMCPServer: a worker whose CAPSTAN_MCP_CONFIG
// names the real `starter mcp serve` stops with one sentence naming the
// server before it polls: through capstan's own server a task could start
// tasks, or approve its own operations.
func TestWorkerRefusesCapstansOwnMCPServer(t *testing.T) {
	t.Parallel()
	env := endpointEnv(t, "e2e-mcp-own", startSandbox(t))
	cfgPath := filepath.Join(t.TempDir(), "mcp.json")
	cfg := fmt.Sprintf(`{"mcpServers": {"tasks": {"command": %q, "args": ["mcp", "serve", "--allow-approve"],
	  "env": {"TEMPORAL_ADDRESS": %q, "CAPSTAN_TASK_QUEUE": "e2e-mcp-own"}}}}`, starterBin, devServerAddr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runWorkerToExit(t, append(env, "CAPSTAN_MCP_CONFIG="+cfgPath))
	last := strings.TrimSpace(lastLines(r.stderr))
	want := `mcp server tasks (stdio: ` + starterBin + `): it answers as capstan's own MCP server`
	if r.code != 1 || !strings.Contains(last, want) || strings.Count(last, "\n") != 0 {
		t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q", r.code, r.stderr, want)
	}
	t.Logf("worker: %s", last)
	if strings.Contains(r.stderr, "Started Worker") {
		t.Errorf("the worker polled before it refused the server: %q", r.stderr)
	}
}
