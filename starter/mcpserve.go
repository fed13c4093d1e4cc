package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Capstan as an MCP server (docs/design.md §5.10): `starter mcp serve`
// speaks MCP on its standard input and output, so that an assistant hands
// capstan a durable task (run_task) and follows it (task_status,
// list_tasks). Each tool calls the function its starter command calls —
// taskInput and startTask, taskStatus, listTasks, sendApproval — so bad
// input is refused in the same sentence, before anything is started, and
// the answer is the command's --json as structuredContent with its text as
// the content.
//
// approve_task and deny_task exist only with --allow-approve: an assistant
// must not approve its own actions unless the person who configured it says
// so. Their answer is recorded as given by the MCP client, mcp:<name> from
// the clientInfo it sent when it connected, never by a name from the call's
// arguments, and only for the tasks that same connection started
// (startedHere).

// Tool names of `starter mcp serve`.
const (
	toolRunTask     = "run_task"
	toolTaskStatus  = "task_status"
	toolListTasks   = "list_tasks"
	toolApproveTask = "approve_task"
	toolDenyTask    = "deny_task"
)

// approverNameRunes bounds the client's name in an approver's identity.
const approverNameRunes = 64

// mcpCommand is `starter mcp`.
func (a *app) mcpCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp serve [--allow-approve]",
		Short: "Capstan as an MCP server",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return usagef("mcp needs a subcommand: serve [--allow-approve]")
		},
	}
	var allowApprove bool
	serve := &cobra.Command{
		Use:   "serve [--allow-approve]",
		Short: "Serve run_task, task_status and list_tasks to an MCP client over stdio",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.cfg.ValidateStarter(); err != nil {
				return usagef("%v", err)
			}
			s := a.newMCPServer(allowApprove, a.dial)
			defer s.close()
			err := s.server.Run(cmd.Context(), &sdk.StdioTransport{})
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				// SIGINT or SIGTERM: how a client stops a server that
				// outlived its closed stdin. A clean end.
				return nil
			}
			return err
		},
	}
	serve.Flags().BoolVar(&allowApprove, "allow-approve", false,
		"also serve approve_task and deny_task; an answer is recorded as given by mcp:<the client's name>")
	cmd.AddCommand(serve)
	return cmd
}

// dialFunc connects to Temporal (app.dial; tests give their own).
type dialFunc func(ctx context.Context) (client.Client, client.Options, error)

// mcpServer is the MCP server of `starter mcp serve`. It dials Temporal at
// the first call that needs it, and keeps that client until close.
type mcpServer struct {
	a      *app
	server *sdk.Server
	dial   dialFunc

	mu   sync.Mutex
	c    client.Client
	opts client.Options

	// connections are the ids given to the client connections, by
	// session.
	connections sync.Map // *sdk.ServerSession → string
}

// connection is the id of the client connection ss: random, given at its
// first call, the same for all its calls and no other connection's.
func (s *mcpServer) connection(ss *sdk.ServerSession) string {
	if id, ok := s.connections.Load(ss); ok {
		return id.(string)
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	id, _ := s.connections.LoadOrStore(ss, "mcp-"+hex.EncodeToString(b))
	return id.(string)
}

// startedBy is who a task run_task starts is recorded as started by: the
// client, as its clientInfo named it, and this connection.
func (s *mcpServer) startedBy(req *sdk.CallToolRequest) *workflows.MCPClient {
	by := &workflows.MCPClient{Connection: s.connection(req.Session)}
	if info := req.ClientInfo(); info != nil {
		by.Name, by.Version = clean(info.Name), clean(info.Version)
	}
	return by
}

// newMCPServer returns the server, with approve_task and deny_task only
// when allowApprove.
func (a *app) newMCPServer(allowApprove bool, dial dialFunc) *mcpServer {
	s := &mcpServer{a: a, dial: dial}
	s.server = sdk.NewServer(&sdk.Implementation{Name: config.MCPServeName, Title: "capstan starter", Version: "1"}, &sdk.ServerOptions{
		Instructions: "Capstan runs agent tasks durably: run_task starts one and answers at once; follow it with task_status until its status is completed, failed or cancelled.",
	})
	yes, no := true, false
	sdk.AddTool(s.server, &sdk.Tool{Name: toolRunTask,
		Description: "Start a capstan agent task and answer at once with its id; follow it with task_status. The fields are `starter run`'s flags (a flag's name with '_' for '-'; a repeatable flag is a list; durations as \"90s\", \"10m\"), with the same defaults and the same refusals, which name the flag.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}}, s.runTask)
	sdk.AddTool(s.server, &sdk.Tool{Name: toolTaskStatus,
		Description: "A task's status, turns, operations (with any awaiting approval) and deliveries, as `starter status --json`; final_text once it completed.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.taskStatus)
	sdk.AddTool(s.server, &sdk.Tool{Name: toolListTasks,
		Description: "The 50 most recent tasks, as `starter list`; needs_human or awaiting_approval keep the running tasks that wait for a person.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.listTasks)
	if allowApprove {
		sdk.AddTool(s.server, &sdk.Tool{Name: toolApproveTask,
			Description: "Approve an operation that waits for approval, as `starter approve`: it is sent, exactly once. Recorded as approved by mcp:<this client's name>.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes}}, s.approveTask)
		sdk.AddTool(s.server, &sdk.Tool{Name: toolDenyTask,
			Description: "Deny an operation that waits for approval, as `starter deny`: nothing is sent and the task's model reads the reason. Recorded as denied by mcp:<this client's name>.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: &no}}, s.denyTask)
	}
	return s
}

// client is the Temporal client, dialled on first use.
func (s *mcpServer) client(ctx context.Context) (client.Client, client.Options, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		c, opts, err := s.dial(ctx)
		if err != nil {
			return nil, opts, err
		}
		s.c, s.opts = c, opts
	}
	return s.c, s.opts, nil
}

func (s *mcpServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
}

// toolError is err as the tool error the client sees (isError): the one
// sentence the command prints after "starter: ".
func toolError(err error) error { return errors.New(clean(err.Error())) }

// textResult is a result whose content is text; the SDK adds the
// structured content.
func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// runTaskInput is run_task's input: `starter run`'s flags but --wait,
// --follow and --json, each named as its flag with '_' for '-'. An absent
// field, or a zero, leaves the flag unset, to its default.
type runTaskInput struct {
	Prompt          string   `json:"prompt" jsonschema:"what the agent should do"`
	Repo            string   `json:"repo,omitempty" jsonschema:"GitHub repository the agent works on, OWNER/NAME"`
	Base            string   `json:"base,omitempty" jsonschema:"base branch for the agent's changes (default main)"`
	Slack           string   `json:"slack,omitempty" jsonschema:"Slack channel that receives the final answer"`
	Comment         []string `json:"comment,omitempty" jsonschema:"also post the final answer as a comment on each OWNER/NAME#N"`
	Model           string   `json:"model,omitempty" jsonschema:"model as PROVIDER:MODEL (default: the starter's CAPSTAN_MODEL)"`
	ID              string   `json:"id,omitempty" jsonschema:"task id (default: generated); never reused"`
	Tenant          string   `json:"tenant,omitempty" jsonschema:"tenant the task's operations belong to, and its fairness key"`
	Priority        int      `json:"priority,omitempty" jsonschema:"the task's priority, 1 (highest) to 5 (default 3)"`
	AllowRepo       []string `json:"allow_repo,omitempty" jsonschema:"further repositories, OWNER/NAME, the task's policy lets it read and write"`
	AllowBranch     []string `json:"allow_branch,omitempty" jsonschema:"existing branches the task's policy lets it write onto besides those it creates"`
	Label           []string `json:"label,omitempty" jsonschema:"labels of the task, KEY=VALUE, which policy rules can read"`
	MaxRefusals     int      `json:"max_refusals,omitempty" jsonschema:"how many tool calls the policy refuses before the task fails"`
	RequireApproval []string `json:"require_approval,omitempty" jsonschema:"tool names or classes whose calls wait for a person's approval"`
	ApprovalTimeout string   `json:"approval_timeout,omitempty" jsonschema:"how long an operation waits for approval before it is denied, e.g. 24h"`
	Fallback        []string `json:"fallback,omitempty" jsonschema:"further models, PROVIDER:MODEL, a turn switches to once when the model stays overloaded"`
	Persistent      bool     `json:"persistent,omitempty" jsonschema:"retry an overloaded model for up to 6h"`
	MaxTurns        int      `json:"max_turns,omitempty" jsonschema:"most model turns before the task fails with max_turns"`
	IdleTimeout     string   `json:"idle_timeout,omitempty" jsonschema:"cut a model stream silent this long and retry it once, e.g. 120s"`
	MaxDuration     string   `json:"max_duration,omitempty" jsonschema:"total limit of one model attempt, e.g. 10m"`
	MaxTokens       int64    `json:"max_tokens,omitempty" jsonschema:"the task's token budget"`
	MaxCost         float64  `json:"max_cost,omitempty" jsonschema:"the task's cost budget in US dollars"`
	HumanTimeout    string   `json:"human_timeout,omitempty" jsonschema:"how long the task waits for a person to resolve an operation, e.g. 48h"`
}

// args are the `starter run` flags in, as --name=value.
func (in runTaskInput) args() []string {
	var args []string
	str := func(name, v string) {
		if v != "" {
			args = append(args, "--"+name+"="+v)
		}
	}
	list := func(name string, vs []string) {
		for _, v := range vs {
			args = append(args, "--"+name+"="+v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			str(name, strconv.FormatInt(v, 10))
		}
	}
	str("prompt", in.Prompt)
	str("repo", in.Repo)
	str("base", in.Base)
	str("slack", in.Slack)
	list("comment", in.Comment)
	str("model", in.Model)
	str("id", in.ID)
	str("tenant", in.Tenant)
	num("priority", int64(in.Priority))
	list("allow-repo", in.AllowRepo)
	list("allow-branch", in.AllowBranch)
	list("label", in.Label)
	num("max-refusals", int64(in.MaxRefusals))
	list("require-approval", in.RequireApproval)
	str("approval-timeout", in.ApprovalTimeout)
	list("fallback", in.Fallback)
	if in.Persistent {
		args = append(args, "--persistent")
	}
	num("max-turns", int64(in.MaxTurns))
	str("idle-timeout", in.IdleTimeout)
	str("max-duration", in.MaxDuration)
	num("max-tokens", in.MaxTokens)
	if in.MaxCost != 0 {
		str("max-cost", strconv.FormatFloat(in.MaxCost, 'g', -1, 64))
	}
	str("human-timeout", in.HumanTimeout)
	return args
}

// flags parses in as `starter run` parses its command line.
func (in runTaskInput) flags() (runFlags, error) {
	var f runFlags
	fs := pflag.NewFlagSet(toolRunTask, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	f.registerID(fs)
	if err := fs.Parse(in.args()); err != nil {
		return f, usagef("%v", err)
	}
	return f, nil
}

// runTask is run_task: the input checked as `starter run` checks its
// flags, then the task started, recording the client and this connection
// as who started it (AgentTaskInput.MCPClient); a refusal starts nothing.
func (s *mcpServer) runTask(ctx context.Context, req *sdk.CallToolRequest, in runTaskInput) (*sdk.CallToolResult, startedTask, error) {
	f, err := in.flags()
	if err != nil {
		return nil, startedTask{}, toolError(err)
	}
	ti, err := s.a.taskInput(f)
	if err != nil {
		return nil, startedTask{}, toolError(err)
	}
	ti.MCPClient = s.startedBy(req)
	c, opts, err := s.client(ctx)
	if err != nil {
		return nil, startedTask{}, toolError(err)
	}
	st, err := s.a.startTask(ctx, c, opts, s.a.cfg.TaskQueue, ti)
	if err != nil {
		return nil, startedTask{}, toolError(err)
	}
	return textResult(st.text()), st, nil
}

// taskRef names a task.
type taskRef struct {
	TaskID string `json:"task_id" jsonschema:"the task's id, as run_task answered it"`
}

// taskStatus is task_status: `starter status --json` as structured
// content, its text as the content.
func (s *mcpServer) taskStatus(ctx context.Context, _ *sdk.CallToolRequest, in taskRef) (*sdk.CallToolResult, workflows.TaskResult, error) {
	c, opts, err := s.client(ctx)
	if err != nil {
		return nil, workflows.TaskResult{}, toolError(err)
	}
	res, _, err := taskStatus(ctx, c, in.TaskID)
	if err != nil {
		return nil, workflows.TaskResult{}, toolError(err)
	}
	var b bytes.Buffer
	printResult(&b, res, s.a.cfg.WorkflowURL(opts.Namespace, workflows.WorkflowID(in.TaskID)))
	return textResult(b.String()), res, nil
}

// listFilter is list_tasks' input: `starter list`'s flags.
type listFilter struct {
	NeedsHuman       bool `json:"needs_human,omitempty" jsonschema:"only running tasks that wait for a person to resolve an operation"`
	AwaitingApproval bool `json:"awaiting_approval,omitempty" jsonschema:"only running tasks with an operation that waits for approval"`
}

// taskList is list_tasks' structured answer.
type taskList struct {
	Tasks []listedTask `json:"tasks"`
}

// listTasks is list_tasks: `starter list`'s rows.
func (s *mcpServer) listTasks(ctx context.Context, _ *sdk.CallToolRequest, in listFilter) (*sdk.CallToolResult, taskList, error) {
	c, opts, err := s.client(ctx)
	if err != nil {
		return nil, taskList{}, toolError(err)
	}
	tasks, err := listTasks(ctx, c, opts.Namespace, in.NeedsHuman, in.AwaitingApproval)
	if err != nil {
		return nil, taskList{}, toolError(err)
	}
	var b bytes.Buffer
	if err := writeTaskList(&b, tasks); err != nil {
		return nil, taskList{}, toolError(err)
	}
	return textResult(b.String()), taskList{Tasks: tasks}, nil
}

// approveInput is approve_task's input.
type approveInput struct {
	TaskID      string `json:"task_id" jsonschema:"the task's id"`
	OperationID string `json:"operation_id" jsonschema:"the operation awaiting approval, as task_status shows it, or an ending of it at a ':'"`
	Note        string `json:"note,omitempty" jsonschema:"a note recorded with the approval"`
	Hash        string `json:"hash,omitempty" jsonschema:"the sha256 of the call approved, as task_status shows it (call_hash): the task takes the approval only for that call"`
}

// denyInput is deny_task's input.
type denyInput struct {
	TaskID      string `json:"task_id" jsonschema:"the task's id"`
	OperationID string `json:"operation_id" jsonschema:"the operation awaiting approval, as task_status shows it, or an ending of it at a ':'"`
	Reason      string `json:"reason" jsonschema:"why it is denied; the task's model reads it"`
}

// approver is who an answer through this server is recorded as given by:
// mcp:<name>, the name the client's clientInfo gave when it connected
// (cleaned, at most approverNameRunes runes). A client that gave no name
// cannot answer.
func approver(req *sdk.CallToolRequest) (string, error) {
	var name string
	if info := req.ClientInfo(); info != nil {
		name = strings.TrimSpace(clean(info.Name))
	}
	if name == "" {
		return "", usagef("this MCP client gave no name in its clientInfo when it connected, and an answer records who gave it")
	}
	if utf8.RuneCountInString(name) > approverNameRunes {
		name = string([]rune(name)[:approverNameRunes])
	}
	return "mcp:" + name, nil
}

func (s *mcpServer) approveTask(ctx context.Context, req *sdk.CallToolRequest, in approveInput) (*sdk.CallToolResult, workflows.ApprovalResult, error) {
	return s.answer(ctx, req, in.TaskID, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: in.OperationID, Note: in.Note, Hash: in.Hash})
}

func (s *mcpServer) denyTask(ctx context.Context, req *sdk.CallToolRequest, in denyInput) (*sdk.CallToolResult, workflows.ApprovalResult, error) {
	return s.answer(ctx, req, in.TaskID, workflows.UpdateDeny, workflows.ApprovalRequest{OperationID: in.OperationID, Reason: in.Reason})
}

// answer is approve_task and deny_task: ar, given by the client
// (approver), checked and sent as `starter approve` and `starter deny` do,
// for a task this connection started (startedHere) and no other.
func (s *mcpServer) answer(ctx context.Context, req *sdk.CallToolRequest, taskID, update string, ar workflows.ApprovalRequest) (*sdk.CallToolResult, workflows.ApprovalResult, error) {
	by, err := approver(req)
	if err != nil {
		return nil, workflows.ApprovalResult{}, toolError(err)
	}
	ar.By = by
	if err := checkApproval(update, ar); err != nil {
		return nil, workflows.ApprovalResult{}, toolError(err)
	}
	c, opts, err := s.client(ctx)
	if err != nil {
		return nil, workflows.ApprovalResult{}, toolError(err)
	}
	if err := s.startedHere(ctx, c, opts, req.Session, taskID); err != nil {
		return nil, workflows.ApprovalResult{}, toolError(err)
	}
	ar.Client = clientIdentity(opts)
	res, err := sendApproval(ctx, c, taskID, update, ar)
	if err != nil {
		return nil, workflows.ApprovalResult{}, toolError(err)
	}
	return textResult(approvalText(taskID, res)), res, nil
}

// startedHere refuses, in one sentence, a task that this client
// connection (ss) did not start: its chain's first input, as Temporal
// recorded it, must name this connection (AgentTaskInput.MCPClient). A
// task never answers for itself, nor for one another connection, a
// person or a schedule started.
func (s *mcpServer) startedHere(ctx context.Context, c client.Client, opts client.Options, ss *sdk.ServerSession, taskID string) error {
	wid := workflows.WorkflowID(taskID)
	d, err := c.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		return fmt.Errorf("task %s: %w", taskID, err)
	}
	dc := opts.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	in, err := startInput(ctx, c, dc, wid, d.RawResponse.GetWorkflowExecutionInfo().GetFirstRunId())
	if err != nil {
		return fmt.Errorf("task %s: reading who started it: %w", taskID, err)
	}
	if in.MCPClient == nil || in.MCPClient.Connection != s.connection(ss) {
		return usagef("task %s was not started by run_task on this MCP connection, and approve_task and deny_task answer only for the tasks it started; answer with `starter approve` or `starter deny`", taskID)
	}
	return nil
}
