package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Secrets given to the worker. They must reach the fakes and never the
// workflow history.
const (
	openAIKey  = "sk-capstan-e2e-openai-7f3a9c"
	githubTok  = "ghp_capstanE2eGithubToken42"
	slackToken = "xoxb-capstan-e2e-slack-token-99"
)

// startSandbox runs the fakes in the test process; the worker reaches them
// only through OPENAI_BASE_URL, GITHUB_API_URL and SLACK_API_URL, as it
// would any compatible server.
func startSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func endpointEnv(t *testing.T, queue string, sb *sandbox.Sandbox) []string {
	return append(baseEnv(t, queue),
		"OPENAI_BASE_URL="+sb.ModelURL, "OPENAI_API_KEY="+openAIKey,
		"GITHUB_API_URL="+sb.GitHubURL, "GITHUB_TOKEN="+githubTok,
		"SLACK_API_URL="+sb.SlackURL, "SLACK_BOT_TOKEN="+slackToken,
	)
}

func decodeResult(t *testing.T, r result) workflows.TaskResult {
	t.Helper()
	var res workflows.TaskResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("starter --json printed no JSON object (%v):\nstdout: %s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return res
}

// TestDemoTaskAgainstCompatibleEndpoints runs the sample task on a plain
// worker whose three endpoints point at the sandbox servers, and checks
// from the servers' own counters that each effect happened exactly once.
func TestDemoTaskAgainstCompatibleEndpoints(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-demo", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-demo-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run",
		"--prompt", "Add a HELLO.md greeting, open a pull request and tell the team.",
		"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", "#capstan-e2e",
		"--model", "openai:demo", "--id", taskID, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)

	if res.Status != workflows.StatusCompleted || res.TaskID != taskID || res.WorkflowID != "task-"+taskID {
		t.Fatalf("result = %+v, want completed task %s", res, taskID)
	}
	if len(res.Turns) != 4 {
		t.Errorf("turns = %d, want 4 (branch, file, pull request, answer)", len(res.Turns))
	}
	for _, turn := range res.Turns {
		if len(turn.Attempts) != 1 || turn.Attempts[0].Outcome != "completed" || turn.Attempts[0].Phase != "STREAM_COMPLETED" {
			t.Errorf("turn %s attempts = %+v, want one completed attempt", turn.TurnID, turn.Attempts)
		}
	}
	wantTools := []string{"github_create_branch", "github_put_file", "github_create_pull_request"}
	if len(res.Operations) != len(wantTools) {
		t.Fatalf("operations = %+v, want %v", res.Operations, wantTools)
	}
	for i, op := range res.Operations {
		if op.Tool != wantTools[i] || op.State != capstan.OutcomeSucceeded || op.Replayed || op.ExternalID == "" {
			t.Errorf("operation %d = %+v, want %s SUCCEEDED with an external id", i, op, wantTools[i])
		}
	}
	prOp := res.Operations[2].OperationID
	if want := "default:" + taskID + ":" + chainScope(t, res.WorkflowID) + ":github_create_pull_request:pr:create:capstan-sandbox/demo:capstan/hello-" + taskID + ":main"; prOp != want {
		t.Errorf("pull request operation id = %q, want %q", prOp, want)
	}
	if len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded || res.Deliveries[0].Target != "slack:#capstan-e2e" {
		t.Fatalf("deliveries = %+v, want one succeeded to slack:#capstan-e2e", res.Deliveries)
	}
	if !strings.Contains(res.FinalText, "pull request") {
		t.Errorf("final_text = %q, want the script's summary", res.FinalText)
	}

	// The servers' counters: exactly one of each effect.
	gh := sb.GitHub.Stats()
	if gh.BranchesCreated != 1 || gh.FilesWritten != 1 || gh.PullRequestsCreated != 1 || gh.CommentsCreated != 0 {
		t.Errorf("github stats = %+v, want 1 branch, 1 file write, 1 pull request, 0 comments", gh)
	}
	if gh.AuthorizedRequests == 0 || gh.AuthorizedRequests != gh.Requests {
		t.Errorf("github saw %d of %d requests with a token, want all", gh.AuthorizedRequests, gh.Requests)
	}
	prs := sb.GitHub.PullRequests("capstan-sandbox/demo")
	if len(prs) != 1 || !strings.Contains(prs[0].Body, "<!-- capstan-op: "+prOp+" -->") {
		t.Errorf("pull requests = %+v, want one whose body carries the marker of %s", prs, prOp)
	}
	if sl := sb.Slack.Stats(); sl.MessagesPosted != 1 {
		t.Errorf("slack stats = %+v, want 1 message posted", sl)
	}
	msgs := sb.Slack.Messages("#capstan-e2e")
	if len(msgs) != 1 || msgs[0].Metadata.EventPayload["operation_id"] != res.Deliveries[0].OperationID {
		t.Errorf("slack messages = %+v, want one with operation_id %s in its metadata", msgs, res.Deliveries[0].OperationID)
	}

	// No secret in the history, though the fakes were sent them.
	hist := history(t, res.WorkflowID)
	for _, secret := range []string{openAIKey, githubTok, slackToken} {
		if strings.Contains(hist, secret) {
			t.Errorf("workflow history contains the secret %q", secret)
		}
	}
	// Tool arguments travel by reference: the file's content is in the
	// ledger, not in history.
	if strings.Contains(hist, "written by a durable agent task") {
		t.Error("workflow history contains the content of HELLO.md")
	}
	if !strings.Contains(hist, "capstan/hello-"+taskID) {
		t.Fatal("history check is blind: the history does not even contain the branch name")
	}
	recordHistory(t, "demo", res.WorkflowID)

	// The id of a finished task is never reused: its operations would replay.
	again := runStarter(t, env, "run", "--prompt", "again", "--model", "openai:demo", "--id", taskID)
	if again.code != 2 || !strings.Contains(again.stderr, "never reused") {
		t.Errorf("rerun of %s: exit %d, stderr %q; want exit 2 saying ids are never reused", taskID, again.code, again.stderr)
	}
}

// history returns the workflow's full history in its wire encoding, where
// every payload, failure message and heartbeat detail appears as raw bytes.
func history(t *testing.T, workflowID string) string {
	t.Helper()
	b, err := proto.Marshal(fetchHistory(t, workflowID))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fetchHistory(t *testing.T, workflowID string) *historypb.History {
	t.Helper()
	return fetchRunHistory(t, temporal, workflowID, "")
}

// fetchRunHistory reads the history of one run (the latest when runID is
// empty) from the server c talks to.
func fetchRunHistory(t *testing.T, c client.Client, workflowID, runID string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history of %s: %v", workflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// recordHistory saves the history of the workflow's latest run on the
// package's dev server for the replay test; see recordRunHistory.
func recordHistory(t *testing.T, name, workflowID string) {
	t.Helper()
	recordRunHistory(t, temporal, name, workflowID, "")
}

// recordRunHistory saves the history of one run for the replay test when
// CAPSTAN_RECORD_HISTORY is set (`make record-history`), as
// internal/workflows/testdata/<workflows.HistoryVersion>-<name>.json. It never
// overwrites a file: a recorded history is what a released version of the
// workflow did, and replay_test.go must keep replaying it. New recordings
// go under a new HistoryVersion.
func recordRunHistory(t *testing.T, c client.Client, name, workflowID, runID string) {
	t.Helper()
	if os.Getenv("CAPSTAN_RECORD_HISTORY") == "" {
		return
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(fetchRunHistory(t, c, workflowID, runID))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testenv.RepoRoot(), "internal", "workflows", "testdata", workflows.HistoryVersion+"-"+name+".json")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		t.Fatalf("%s already exists and recorded histories are never overwritten: "+
			"to record new ones, change workflows.HistoryVersion (now %q) along with the workflow logic", path, workflows.HistoryVersion)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		t.Fatalf("write %s: %v", path, err)
	}
	t.Logf("recorded %s", path)
}

// TestStarterRefusesBadInput: one clear line on stderr, exit 2, nothing
// started.
func TestStarterRefusesBadInput(t *testing.T) {
	t.Parallel()
	env := baseEnv(t, "e2e-bad-input")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"repo without a slash", []string{"--prompt", "x", "--repo", "capstan"}, "OWNER/NAME"},
		{"repo the tools would refuse", []string{"--prompt", "x", "--repo", "../x"}, "OWNER/NAME"},
		{"bad base branch", []string{"--prompt", "x", "--base", "a..b"}, "--base"},
		{"unknown provider", []string{"--prompt", "x", "--model", "llamacorp:big"}, `unknown model provider "llamacorp"`},
		{"empty prompt", []string{"--prompt", "  "}, "--prompt is required"},
		{"no prompt", nil, "--prompt is required"},
		{"bad max turns", []string{"--prompt", "x", "--max-turns", "0"}, "--max-turns"},
		{"bad task id", []string{"--prompt", "x", "--id", "a/b"}, "--id"},
		{"unknown flag", []string{"--prompt", "x", "--frobnicate"}, "unknown flag"},
		{"comment without a number", []string{"--prompt", "x", "--comment", "acme/app"}, "OWNER/NAME#N"},
		{"comment on issue zero", []string{"--prompt", "x", "--comment", "acme/app#0"}, "OWNER/NAME#N"},
		{"bad idle timeout", []string{"--prompt", "x", "--idle-timeout", "soon"}, "--idle-timeout"},
		{"idle longer than the attempt", []string{"--prompt", "x", "--idle-timeout", "20m"}, "must be shorter than"},
		{"cost budget on an unpriced model", []string{"--prompt", "x", "--model", "openai:unpriced", "--max-cost", "1"},
			"--max-cost needs a price for every model of the task, and openai:unpriced has none"},
		{"cost budget on an unpriced fallback", []string{"--prompt", "x", "--model", "openai:gpt-4.1", "--fallback", "anthropic:unpriced", "--max-cost", "0.5"},
			"anthropic:unpriced has none"},
		{"negative token budget", []string{"--prompt", "x", "--max-tokens", "-5"}, "--max-tokens"},
		{"approval of an unknown tool", []string{"--prompt", "x", "--require-approval", "github_merge"},
			`--require-approval "github_merge" is neither a tool (`},
		{"approval timeout too short", []string{"--prompt", "x", "--approval-timeout", "10ms"}, "--approval-timeout"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("e2e-bad-%d-%d", i, time.Now().UnixNano())
			args := append([]string{"run"}, tc.args...)
			if tc.name != "bad task id" {
				args = append(args, "--id", id)
			}
			r := runStarter(t, env, args...)
			if r.code != 2 {
				t.Fatalf("exit = %d, want 2\nstderr: %s", r.code, r.stderr)
			}
			if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr = %q, want one line mentioning %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
			assertNotStarted(t, id)
		})
	}
}

func assertNotStarted(t *testing.T, taskID string) {
	t.Helper()
	_, err := describe(context.Background(), workflows.WorkflowID(taskID))
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		t.Errorf("task %s: describe = %v, want not found (nothing started)", taskID, err)
	}
}

// TestStarterAttachesToARunningTaskWithTheSameArguments: starter run with
// the id of a running task and the same arguments attaches to it — the
// same workflow run, nothing started — and with other arguments refuses
// in one sentence saying what differs, exit 2, leaving the task alone.
//
// Attached with --wait, the starter follows the task to its end and prints
// its result, as it does a task it started.
func TestStarterAttachesToARunningTaskWithTheSameArguments(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-attach", sb) // no worker until the end: the task stays running
	id := fmt.Sprintf("e2e-dup-%d", time.Now().UnixNano())
	args := []string{"run", "--prompt", "wait for me", "--model", "openai:hello", "--repo", "acme/app", "--id", id}
	first := runStarter(t, env, args...)
	if first.code != 0 || !strings.Contains(first.stdout, "started task "+id) || !strings.Contains(first.stdout, "/namespaces/default/workflows/task-"+id) {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q; want the workflow id and UI link", first.code, first.stdout, first.stderr)
	}
	t.Cleanup(func() {
		_ = temporal.TerminateWorkflow(context.Background(), workflows.WorkflowID(id), "", "test over")
	})
	desc, err := describe(context.Background(), workflows.WorkflowID(id))
	if err != nil {
		t.Fatal(err)
	}
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--prompt", "again", "--model", "openai:hello", "--repo", "acme/app", "--id", id}, "task " + id + " is running with another --prompt;"},
		{[]string{"run", "--prompt", "wait for me", "--model", "openai:hello", "--repo", "acme/other", "--id", id}, "task " + id + " is running with --repo acme/app, not acme/other;"},
		{append(slices.Clone(args), "--max-turns", "7"), "is running with --max-turns 20, not 7;"},
	} {
		r := runStarter(t, env, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("starter %s: exit %d, stderr %q; want exit 2 and one line saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	again := runStarter(t, env, append(slices.Clone(args), "--json")...)
	var out struct {
		RunID    string `json:"run_id"`
		Attached bool   `json:"attached"`
	}
	if again.code != 0 || json.Unmarshal([]byte(again.stdout), &out) != nil || !out.Attached || out.RunID != runID {
		t.Fatalf("same arguments again: exit %d, stdout %q, stderr %q; want attached to run %s", again.code, again.stdout, again.stderr, runID)
	}
	if text := runStarter(t, env, args...); text.code != 0 || !strings.Contains(text.stdout, "attached to running task "+id) {
		t.Errorf("same arguments again: exit %d, stdout %q; want 'attached to running task %s'", text.code, text.stdout, id)
	}
	desc, err = describe(context.Background(), workflows.WorkflowID(id))
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING ||
		desc.GetWorkflowExecutionInfo().GetExecution().GetRunId() != runID || desc.GetWorkflowExecutionInfo().GetHistoryLength() > 2 {
		t.Fatalf("task after the refused and attached starts: %v (history %d events), %v; want the first run still running, untouched",
			desc.GetWorkflowExecutionInfo().GetStatus(), desc.GetWorkflowExecutionInfo().GetHistoryLength(), err)
	}

	var stdout bytes.Buffer
	var stderr syncBuffer
	follow := exec.Command(starterBin, append(slices.Clone(args), "--wait", "--json")...)
	follow.Env, follow.Stdout, follow.Stderr = env, &stdout, &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	stderr.waitFor(t, "attached to running task "+id, time.Minute)
	startWorker(t, env)
	if err := follow.Wait(); err != nil {
		t.Fatalf("attached --wait: %v, stderr %s", err, stderr.String())
	}
	res := decodeResult(t, result{stdout: stdout.String(), stderr: stderr.String()})
	if res.Status != workflows.StatusCompleted || res.TaskID != id {
		t.Fatalf("attached --wait printed task %s %s (%s); want %s completed", res.TaskID, res.Status, res.Message, id)
	}
}
