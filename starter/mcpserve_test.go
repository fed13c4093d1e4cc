package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/pflag"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/workflows"
)

// fakeTemporal is the part of a Temporal client that run_task and the
// approval tools use; it records what they sent. Anything else panics.
type fakeTemporal struct {
	client.Client
	mu      sync.Mutex
	started []workflows.AgentTaskInput
	memos   []map[string]any
	updates []client.UpdateWorkflowOptions
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, args[0].(workflows.AgentTaskInput))
	f.memos = append(f.memos, o.Memo)
	return fakeRun{id: o.ID}, nil
}

// start is the last start of workflowID, -1 for none.
func (f *fakeTemporal) start(workflowID string) int {
	for i := len(f.started) - 1; i >= 0; i-- {
		if workflows.WorkflowID(f.started[i].TaskID) == workflowID {
			return i
		}
	}
	return -1
}

// DescribeWorkflow answers for the task started last under workflowID,
// with the memo its start set: every start here makes its task, none
// attaches.
func (f *fakeTemporal) DescribeWorkflow(_ context.Context, workflowID, _ string) (*client.WorkflowExecutionDescription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.start(workflowID)
	if i < 0 {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + workflowID)
	}
	fields := map[string]*commonpb.Payload{}
	for k, v := range f.memos[i] {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			return nil, err
		}
		fields[k] = p
	}
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Memo: &commonpb.Memo{Fields: fields}, FirstRunId: "run-1"},
	}}, nil
}

// GetWorkflowHistory is the started event of the task started last under
// workflowID, its input as the start gave it.
func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, workflowID, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.mu.Lock()
	defer f.mu.Unlock()
	input, err := converter.GetDefaultDataConverter().ToPayloads(f.started[f.start(workflowID)])
	return &fakeHistory{err: err, events: []*historypb.HistoryEvent{{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: input}}}}}
}

type fakeHistory struct {
	events []*historypb.HistoryEvent
	err    error
}

func (h *fakeHistory) HasNext() bool { return len(h.events) > 0 }

func (h *fakeHistory) Next() (*historypb.HistoryEvent, error) {
	ev := h.events[0]
	h.events = h.events[1:]
	return ev, h.err
}

func (f *fakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, o)
	req := o.Args[0].(workflows.ApprovalRequest)
	return fakeUpdate{res: workflows.ApprovalResult{OperationID: "t:1:github_create_pull_request", Decision: o.UpdateName + "d", By: req.By, Summary: "pull request"}}, nil
}

func (f *fakeTemporal) Close() {}

type fakeRun struct {
	client.WorkflowRun
	id string
}

func (r fakeRun) GetID() string  { return r.id }
func (fakeRun) GetRunID() string { return "run-1" }

type fakeUpdate struct {
	client.WorkflowUpdateHandle
	res workflows.ApprovalResult
}

func (u fakeUpdate) Get(_ context.Context, v any) error {
	*v.(*workflows.ApprovalResult) = u.res
	return nil
}

// serveMCP connects a client named clientName, in memory, to `starter mcp
// serve`'s server over fake, and counts the dials.
func serveMCP(t *testing.T, allowApprove bool, clientName string, fake *fakeTemporal) (*sdk.ClientSession, *int) {
	t.Helper()
	s, dials := newTestMCPServer(t, allowApprove, fake)
	return connectMCP(t, s, clientName), dials
}

// newTestMCPServer is `starter mcp serve`'s server over fake, counting the
// dials.
func newTestMCPServer(t *testing.T, allowApprove bool, fake *fakeTemporal) (*mcpServer, *int) {
	t.Helper()
	a := &app{cfg: config.FromEnv(func(string) string { return "" })}
	dials := new(int)
	s := a.newMCPServer(allowApprove, func(context.Context) (client.Client, client.Options, error) {
		*dials++
		return fake, client.Options{Namespace: "default"}, nil
	})
	t.Cleanup(s.close)
	return s, dials
}

// connectMCP connects a client named clientName to s, in memory: a
// connection of its own.
func connectMCP(t *testing.T, s *mcpServer, clientName string) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: clientName, Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return res, strings.Join(text, "")
}

func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// Without --allow-approve the server offers no way to answer an approval;
// with it, approve_task and deny_task too.
func TestMCPServeOffersApprovalOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	cs, _ := serveMCP(t, false, "assistant", &fakeTemporal{})
	if got, want := toolNames(t, cs), []string{"list_tasks", "run_task", "task_status"}; !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	res, _ := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "approve_task", Arguments: map[string]any{"task_id": "t", "operation_id": "o"}})
	if res != nil && !res.IsError {
		t.Errorf("approve_task without --allow-approve answered %+v", res)
	}
	cs, _ = serveMCP(t, true, "assistant", &fakeTemporal{})
	if got, want := toolNames(t, cs), []string{"approve_task", "deny_task", "list_tasks", "run_task", "task_status"}; !slices.Equal(got, want) {
		t.Errorf("tools with --allow-approve = %v, want %v", got, want)
	}
}

// run_task's fields are `starter run`'s flags, one for one (a flag's name
// with '_' for '-'), but --wait, --follow and --json; only the prompt is
// required.
func TestMCPRunTaskFieldsAreRunFlags(t *testing.T) {
	t.Parallel()
	cs, _ := serveMCP(t, false, "assistant", &fakeTemporal{})
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	for _, tool := range tools.Tools {
		if tool.Name == toolRunTask {
			b, _ := json.Marshal(tool.InputSchema)
			if err := json.Unmarshal(b, &schema); err != nil {
				t.Fatal(err)
			}
		}
	}
	var fields []string
	for name := range schema.Properties {
		fields = append(fields, strings.ReplaceAll(name, "_", "-"))
	}
	var flags []string
	(&app{}).runCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "wait" && f.Name != "follow" && f.Name != "json" {
			flags = append(flags, f.Name)
		}
	})
	slices.Sort(fields)
	slices.Sort(flags)
	if !slices.Equal(fields, flags) {
		t.Errorf("run_task's fields (as flags) = %v\nstarter run's flags = %v", fields, flags)
	}
	if !slices.Equal(schema.Required, []string{"prompt"}) {
		t.Errorf("required = %v, want [prompt]", schema.Required)
	}
}

// Bad input to run_task is the tool error (isError) whose text is the
// sentence `starter run` prints for the same flags, and nothing is
// started: Temporal is not even dialled.
func TestMCPRunTaskRefusesAsStarterRunDoes(t *testing.T) {
	t.Parallel()
	fake := &fakeTemporal{}
	cs, dials := serveMCP(t, false, "assistant", fake)
	for _, tc := range []struct {
		args map[string]any
		cli  []string
	}{
		{map[string]any{"prompt": "  "}, []string{"--prompt", "  "}},
		{map[string]any{"prompt": "p", "max_turns": 5000}, []string{"--prompt", "p", "--max-turns", "5000"}},
		{map[string]any{"prompt": "p", "repo": "not a repo"}, []string{"--prompt", "p", "--repo", "not a repo"}},
		{map[string]any{"prompt": "p", "human_timeout": "soon"}, []string{"--prompt", "p", "--human-timeout", "soon"}},
		{map[string]any{"prompt": "p", "human_timeout": "10s"}, []string{"--prompt", "p", "--human-timeout", "10s"}},
		{map[string]any{"prompt": "p", "require_approval": []string{"github_launch_missiles"}}, []string{"--prompt", "p", "--require-approval", "github_launch_missiles"}},
		{map[string]any{"prompt": "p", "comment": []string{"a/b#1", "a/b#1"}}, []string{"--prompt", "p", "--comment", "a/b#1", "--comment", "a/b#1"}},
		{map[string]any{"prompt": "p", "id": "no spaces"}, []string{"--prompt", "p", "--id", "no spaces"}},
		{map[string]any{"prompt": "p", "label": []string{"team"}}, []string{"--prompt", "p", "--label", "team"}},
		{map[string]any{"prompt": "p", "model": "nonsense"}, []string{"--prompt", "p", "--model", "nonsense"}},
		{map[string]any{"prompt": "p", "max_tokens": -5}, []string{"--prompt", "p", "--max-tokens", "-5"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"run"}, tc.cli...), func(string) string { return "" }, &stdout, &stderr)
		want := strings.TrimSuffix(strings.TrimPrefix(stderr.String(), "starter: "), "\n")
		if code != 2 || want == "" || strings.Contains(want, "\n") {
			t.Fatalf("starter run %q: exit %d, stderr %q; want exit 2 and one sentence", tc.cli, code, stderr.String())
		}
		res, text := callTool(t, cs, toolRunTask, tc.args)
		if !res.IsError || text != want {
			t.Errorf("run_task %v: isError %t, %q; want the tool error %q", tc.args, res.IsError, text, want)
		}
	}
	if *dials != 0 || len(fake.started) != 0 {
		t.Errorf("refused input dialled Temporal %d times and started %d tasks; want none", *dials, len(fake.started))
	}
}

// run_task starts the task `starter run` would start with the same flags,
// and answers `starter run --json`'s fields as structured content and its
// text as the content.
func TestMCPRunTaskStartsTheTask(t *testing.T) {
	t.Parallel()
	fake := &fakeTemporal{}
	cs, _ := serveMCP(t, false, "assistant", fake)
	res, text := callTool(t, cs, toolRunTask, map[string]any{"prompt": "Open a pull request.", "repo": "acme/app", "id": "t1",
		"require_approval": []string{"github_create_pull_request"}, "human_timeout": "2h", "max_turns": 7})
	if res.IsError {
		t.Fatalf("run_task: %s", text)
	}
	if len(fake.started) != 1 {
		t.Fatalf("started %d tasks, want 1", len(fake.started))
	}
	in := fake.started[0]
	if in.TaskID != "t1" || in.Prompt != "Open a pull request." || in.Repo != "acme/app" || in.Base != config.DefaultBaseBranch ||
		in.MaxTurns != 7 || in.HumanTimeout != 2*time.Hour || !slices.Equal(in.Policy.RequireApproval, []string{"github_create_pull_request"}) {
		t.Errorf("task input = %+v, policy %+v", in, in.Policy)
	}
	var got startedTask
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &got); err != nil || got.TaskID != "t1" || got.WorkflowID != "task-t1" || got.RunID != "run-1" {
		t.Errorf("structured content = %s (%v)", b, err)
	}
	if text != got.text() {
		t.Errorf("text = %q, want %q", text, got.text())
	}
}

// approve_task and deny_task record the MCP client as who answered,
// mcp:<its name from clientInfo>; the arguments cannot name anyone else,
// a denial needs its reason as `starter deny` does, and a client that gave
// no name cannot answer.
func TestMCPApprovalIsRecordedAsTheClient(t *testing.T) {
	t.Parallel()
	fake := &fakeTemporal{}
	cs, _ := serveMCP(t, true, "claude-desktop", fake)
	if res, text := callTool(t, cs, toolRunTask, map[string]any{"prompt": "p", "id": "t1"}); res.IsError {
		t.Fatalf("run_task: %s", text)
	}
	res, text := callTool(t, cs, toolApproveTask, map[string]any{"task_id": "t1", "operation_id": "github_create_pull_request", "note": "fine"})
	if res.IsError || len(fake.updates) != 1 {
		t.Fatalf("approve_task: %s; %d updates sent", text, len(fake.updates))
	}
	u := fake.updates[0]
	req := u.Args[0].(workflows.ApprovalRequest)
	if u.WorkflowID != "task-t1" || u.UpdateName != workflows.UpdateApprove || req.By != "mcp:claude-desktop" || req.Note != "fine" {
		t.Errorf("update = %s %s %+v, want approve by mcp:claude-desktop", u.WorkflowID, u.UpdateName, req)
	}
	if want := "task t1: operation t:1:github_create_pull_request approved by mcp:claude-desktop: pull request\n"; text != want {
		t.Errorf("text = %q, want %q", text, want)
	}

	if res, text := callTool(t, cs, toolApproveTask, map[string]any{"task_id": "t1", "operation_id": "o", "by": "alice"}); !res.IsError {
		t.Errorf("approve_task with a \"by\" argument was taken: %s", text)
	}
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"deny", "t1", "o", "--reason", ""}, func(string) string { return "" }, &stdout, &stderr)
	want := strings.TrimSuffix(strings.TrimPrefix(stderr.String(), "starter: "), "\n")
	if res, text := callTool(t, cs, toolDenyTask, map[string]any{"task_id": "t1", "operation_id": "o", "reason": ""}); !res.IsError || text != want {
		t.Errorf("deny_task without a reason: isError %t, %q; want %q", res.IsError, text, want)
	}
	if len(fake.updates) != 1 {
		t.Errorf("%d updates sent, want only the approval's", len(fake.updates))
	}

	nameless := &fakeTemporal{}
	cs, _ = serveMCP(t, true, "", nameless)
	if res, text := callTool(t, cs, toolDenyTask, map[string]any{"task_id": "t1", "operation_id": "o", "reason": "no"}); !res.IsError ||
		!strings.Contains(text, "gave no name") || len(nameless.updates) != 0 {
		t.Errorf("a nameless client's deny_task: isError %t, %q, %d updates sent; want refused, nothing sent", res.IsError, text, len(nameless.updates))
	}
}

// approver cuts a long name and cleans it of control characters.
func TestMCPApproverIsCleanAndBounded(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"  bot\x1b[31m  ":        "mcp:bot",
		strings.Repeat("é", 100): "mcp:" + strings.Repeat("é", approverNameRunes),
	} {
		req := &sdk.CallToolRequest{Session: nil, Params: &sdk.CallToolParamsRaw{Meta: sdk.Meta{
			"io.modelcontextprotocol/protocolVersion": "2026-07-28", sdk.MetaKeyClientInfo: map[string]any{"name": name, "version": "1"}}}}
		if got, err := approver(req); err != nil || got != want {
			t.Errorf("approver(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := approver(&sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{}}); err == nil || !errors.As(err, new(*usageError)) {
		t.Errorf("approver without a client = %v, want a usage error", err)
	}
}

// run_task records the client and its connection in the task's input, and
// approve_task and deny_task answer only for the tasks their own
// connection started: not for one another connection of the same client
// started, nor one started without mcp serve. Each refusal is one
// sentence, and nothing is sent.
func TestMCPApprovalOnlyForTasksThisConnectionStarted(t *testing.T) {
	t.Parallel()
	fake := &fakeTemporal{}
	s, _ := newTestMCPServer(t, true, fake)
	one, two := connectMCP(t, s, "assistant"), connectMCP(t, s, "assistant")
	for _, c := range []struct {
		cs *sdk.ClientSession
		id string
	}{{one, "t-one"}, {two, "t-two"}} {
		if res, text := callTool(t, c.cs, toolRunTask, map[string]any{"prompt": "p", "id": c.id}); res.IsError {
			t.Fatalf("run_task %s: %s", c.id, text)
		}
	}
	a, b := fake.started[0].MCPClient, fake.started[1].MCPClient
	if a == nil || b == nil || a.Name != "assistant" || a.Version != "1" || a.Connection == "" || b.Connection == "" || a.Connection == b.Connection {
		t.Fatalf("recorded starters %+v and %+v: want the client's name and version and two connections' ids", a, b)
	}
	// A task started by `starter run`, with no MCP client.
	fake.mu.Lock()
	fake.started = append(fake.started, workflows.AgentTaskInput{TaskID: "t-cli", Prompt: "p"})
	fake.memos = append(fake.memos, nil)
	fake.mu.Unlock()

	for _, c := range []struct {
		cs   *sdk.ClientSession
		tool string
		task string
	}{{one, toolApproveTask, "t-two"}, {two, toolDenyTask, "t-one"}, {one, toolApproveTask, "t-cli"}, {two, toolDenyTask, "t-cli"}} {
		args := map[string]any{"task_id": c.task, "operation_id": "o"}
		if c.tool == toolDenyTask {
			args["reason"] = "no"
		}
		res, text := callTool(t, c.cs, c.tool, args)
		want := "task " + c.task + " was not started by run_task on this MCP connection"
		if !res.IsError || !strings.HasPrefix(text, want) || strings.Count(text, ". ") > 0 {
			t.Errorf("%s of %s: isError %t, %q; want one sentence starting %q", c.tool, c.task, res.IsError, text, want)
		}
	}
	if len(fake.updates) != 0 {
		t.Fatalf("%d updates sent for tasks another connection started", len(fake.updates))
	}
	if res, text := callTool(t, one, toolApproveTask, map[string]any{"task_id": "t-one", "operation_id": "o"}); res.IsError {
		t.Errorf("approve_task of its own task: %s", text)
	}
	if res, text := callTool(t, two, toolDenyTask, map[string]any{"task_id": "t-two", "operation_id": "o", "reason": "no"}); res.IsError {
		t.Errorf("deny_task of its own task: %s", text)
	}
	if len(fake.updates) != 2 || fake.updates[0].WorkflowID != "task-t-one" || fake.updates[1].WorkflowID != "task-t-two" {
		t.Errorf("updates %+v, want one to each connection's own task", fake.updates)
	}
}
