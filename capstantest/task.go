package capstantest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TaskOptions describe a task as `starter run`'s flags do. Only Prompt,
// Model and TaskQueue are needed; zero fields take the starter's defaults.
type TaskOptions struct {
	// ID is the task's id (the workflow id is "task-" and it); empty
	// generates one from the test's name.
	ID string
	// Prompt is what the agent should do.
	Prompt string
	// Model is PROVIDER:MODEL; with a [Sandbox], "openai:NAME" or
	// "anthropic:NAME" plays the script NAME ([Sandbox.Script]).
	Model string
	// Fallbacks are further models a turn may switch to (--fallback).
	Fallbacks []string
	// TaskQueue is the queue the worker polls.
	TaskQueue string
	// Repository is the repository the agent works on, OWNER/NAME (--repo).
	Repository string
	// Repositories are further repositories the task's policy lets it
	// touch (--allow-repo).
	Repositories []string
	// Base is the base branch (default "main").
	Base string
	// SlackChannel receives the final answer (--slack).
	SlackChannel string
	// Comments are issues or pull requests, OWNER/NAME#N, that receive the
	// final answer as a comment (--comment).
	Comments []string
	// Tenant is the task's tenant (default "default").
	Tenant string
	// Labels are the task's labels, which policy rules read (--label).
	Labels map[string]string
	// AllowBranches are existing branches the task may write onto
	// (--allow-branch).
	AllowBranches []string
	// PolicyFile names a policy file the task's calls are decided
	// against, as CAPSTAN_POLICY does for the starter; Rules is a policy
	// file's text given directly. At most one of them.
	PolicyFile string
	Rules      string
	// RequireApproval are tool names or classes whose calls wait for a
	// person's approval (--require-approval): see [Task.Approve].
	RequireApproval []string
	// MaxRefusals is how many calls the policy refuses before the task
	// fails (default the worker's, 3).
	MaxRefusals int
	// MaxTurns bounds the model turns (default 20).
	MaxTurns int
	// MaxTokens and MaxCostUSD are the task's budget (default the
	// worker's).
	MaxTokens  int64
	MaxCostUSD float64
	// HumanTimeout bounds the wait for a person to resolve an operation
	// (default 24h); ApprovalTimeout the wait for an approval (default
	// 168h).
	HumanTimeout, ApprovalTimeout time.Duration
}

// Task is a task a test started.
type Task struct {
	t     testing.TB
	c     client.Client
	id    string
	wid   string
	runID string
}

// StartTask starts the AgentTask workflow of o on o.TaskQueue, as
// `starter run` starts it (the same workflow id, id policies, search
// attributes, fairness key and input), and fails the test when the
// options are invalid or the start is refused. It does not wait for it.
func StartTask(t testing.TB, c client.Client, o TaskOptions) *Task {
	t.Helper()
	in, err := taskInput(t, o)
	if err != nil {
		t.Fatalf("capstantest: StartTask: %v", err)
	}
	if o.TaskQueue == "" {
		t.Fatalf("capstantest: StartTask: TaskOptions.TaskQueue is empty: give the queue the worker polls")
	}
	wid := workflows.WorkflowID(in.TaskID)
	opts := client.StartWorkflowOptions{
		ID:                                       wid,
		TaskQueue:                                o.TaskQueue,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary:                            summary(in),
		Priority:                                 temporal.Priority{FairnessKey: in.Tenant},
		TypedSearchAttributes:                    temporal.NewSearchAttributes(append(workflows.StartAttributes(in), workflows.AttrTenant.ValueSet(in.Tenant))...),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run client.WorkflowRun
	for pause := 100 * time.Millisecond; ; pause *= 2 {
		run, err = c.ExecuteWorkflow(ctx, opts, workflows.AgentTask, in)
		// A search attribute registered a moment ago is served once the
		// server's namespace cache refreshes.
		if !undefinedAttribute(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(min(pause, 2*time.Second))
	}
	if err != nil {
		t.Fatalf("capstantest: start task %s: %v", in.TaskID, err)
	}
	return &Task{t: t, c: c, id: in.TaskID, wid: wid, runID: run.GetRunID()}
}

var undefinedAttributeText = regexp.MustCompile(`no mapping defined for search attribute|search attribute \w+ is not defined`)

func undefinedAttribute(err error) bool {
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &invalid) && undefinedAttributeText.MatchString(invalid.Message)
}

// taskInput checks o as `starter run` checks its flags and builds the
// workflow's input.
func taskInput(t testing.TB, o TaskOptions) (workflows.AgentTaskInput, error) {
	var in workflows.AgentTaskInput
	if strings.TrimSpace(o.Prompt) == "" {
		return in, errors.New("TaskOptions.Prompt is empty")
	}
	if o.Repository != "" {
		if _, err := ghref.ParseRepo(o.Repository); err != nil {
			return in, fmt.Errorf("Repository %q is not of the form OWNER/NAME", o.Repository)
		}
	}
	base := cmpOr(o.Base, config.DefaultBaseBranch)
	if !ghref.ValidBranch(base) {
		return in, fmt.Errorf("Base %q is not a valid branch name", base)
	}
	m := cmpOr(o.Model, config.DefaultModel)
	for _, ref := range append([]string{m}, o.Fallbacks...) {
		if _, err := model.ParseRef(ref); err != nil {
			return in, fmt.Errorf("model %q: %v", ref, err)
		}
	}
	var comments []contract.CommentTarget
	for _, s := range o.Comments {
		issue, err := ghref.ParseIssue(s)
		if err != nil {
			return in, fmt.Errorf("Comments: %q is not of the form OWNER/NAME#N", s)
		}
		comments = append(comments, contract.CommentTarget{Repo: issue.Repo.String(), Number: issue.Number})
	}
	id := o.ID
	if id == "" {
		id = newTaskID(t.Name())
	}
	tenant := cmpOr(o.Tenant, config.DefaultTenant)
	tp := &contract.TaskPolicy{Base: base, Tenant: tenant, MaxRefusals: o.MaxRefusals, Labels: o.Labels}
	seen := map[string]bool{}
	add := func(repo string) {
		if repo != "" && !seen[strings.ToLower(repo)] {
			seen[strings.ToLower(repo)] = true
			tp.Repositories = append(tp.Repositories, repo)
		}
	}
	add(o.Repository)
	for _, c := range comments {
		add(c.Repo)
	}
	for _, r := range o.Repositories {
		repo, err := ghref.ParseRepo(r)
		if err != nil {
			return in, fmt.Errorf("Repositories: %q is not of the form OWNER/NAME", r)
		}
		add(repo.String())
	}
	for _, b := range o.AllowBranches {
		if !slices.Contains(tp.AllowBranches, b) {
			tp.AllowBranches = append(tp.AllowBranches, b)
		}
	}
	for _, n := range o.RequireApproval {
		if !slices.Contains(tp.RequireApproval, n) {
			tp.RequireApproval = append(tp.RequireApproval, n)
		}
	}
	switch {
	case o.PolicyFile != "" && o.Rules != "":
		return in, errors.New("give PolicyFile or Rules, not both")
	case o.PolicyFile != "":
		data, err := os.ReadFile(o.PolicyFile)
		if err != nil {
			return in, err
		}
		tp.File, tp.Source = o.PolicyFile, string(data)
	case o.Rules != "":
		tp.File, tp.Source = "capstantest.TaskOptions.Rules", o.Rules
	}
	if tp.Source != "" {
		if _, err := policy.Parse(tp.File, []byte(tp.Source)); err != nil {
			return in, err
		}
	}
	if o.MaxTokens < 0 || o.MaxCostUSD < 0 {
		return in, errors.New("MaxTokens and MaxCostUSD must not be negative")
	}
	return workflows.AgentTaskInput{
		TaskID: id, Tenant: tenant, Logic: workflows.CurrentLogic, Prompt: o.Prompt, Repo: o.Repository, Base: base,
		SlackChannel: o.SlackChannel, Comments: comments, Model: m, Fallbacks: o.Fallbacks,
		MaxTurns: cmpOr(o.MaxTurns, config.DefaultMaxTurns), HumanTimeout: cmpOr(o.HumanTimeout, config.DefaultHumanTimeout),
		ApprovalTimeout: cmpOr(o.ApprovalTimeout, config.DefaultApprovalTimeout), Policy: tp,
		Budget: contract.Budget{MaxTokens: o.MaxTokens, MaxCostUSD: o.MaxCostUSD},
	}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newTaskID is a fresh task id from the test's name: its letters and
// digits, then a random suffix, so reruns never collide.
func newTaskID(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 60 {
			break
		}
	}
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	return strings.Trim(b.String(), "-") + "-" + hex.EncodeToString(rnd)
}

// summary is the task's static summary, as the starter writes it: the
// repository and the prompt's first line.
func summary(in workflows.AgentTaskInput) string {
	p := ""
	for line := range strings.Lines(in.Prompt) {
		if p = strings.TrimSpace(line); p != "" {
			break
		}
	}
	if r := []rune(p); len(r) > 80 {
		p = string(r[:80]) + "…"
	}
	switch {
	case in.Repo == "":
		return p
	case p == "":
		return in.Repo
	}
	return in.Repo + " · " + p
}

// ID is the task's id.
func (k *Task) ID() string { return k.id }

// WorkflowID is the id of the task's workflow: "task-" and its id.
func (k *Task) WorkflowID() string { return k.wid }

// RunID is the run id of the task's workflow as it started.
func (k *Task) RunID() string { return k.runID }

// Status is a task's status.
type Status string

// A task's statuses.
const (
	StatusRunning    Status = "running"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusCancelled  Status = "cancelled"
	StatusNeedsHuman Status = "needs_human"
)

// TaskResult is a task's result, as `starter status --json` shows it.
type TaskResult struct {
	TaskID, WorkflowID string
	Status             Status
	// FailureCode says why a failed task failed (budget_exhausted,
	// policy_violation, max_turns, …); Message says it in words.
	FailureCode string
	Message     string
	// Answer is the model's final text.
	Answer string
	// Model is the provider:model the task ended on.
	Model      string
	Operations []Operation
	Deliveries []Delivery
	// Spend is what the task's model requests spent.
	Spend Spend
}

// Operation is one tool call's operation.
type Operation struct {
	// ID is the operation's id, what Approve and Resolve take.
	ID   string
	Tool string
	// Outcome is what is known of its effect: succeeded, failed,
	// unknown, needs_human, awaiting_approval, denied, …
	Outcome capstan.Outcome
	// ExternalID names the effect in the service: the comment, pull
	// request or message.
	ExternalID string
	// Replayed: the effect was recorded before and its result replayed,
	// nothing sent again. Recovered: its outcome was unknown and a lookup
	// (or a person) found it had happened.
	Replayed, Recovered bool
	// Reason says why it is unknown, needs a person, failed or was denied.
	Reason string
	// PolicyRule names the policy rule that refused it, if one did.
	PolicyRule string
	// Summary says in one line what it does.
	Summary string
	// CallHash is the SHA-256 of the call awaiting approval, which
	// Approve sends back.
	CallHash string
	// Approval is "approved" or "denied" once answered; ApprovedBy who did.
	Approval, ApprovedBy string
	// ResolvedBy names who resolved it, when a person did.
	ResolvedBy string
}

// Delivery is one delivery of the final answer (Slack or a comment).
type Delivery struct {
	OperationID string
	Target      string
	Outcome     capstan.Outcome
	ExternalID  string
}

// Spend is what a task's model requests spent, against its budget.
type Spend struct {
	Tokens, EstimatedTokens int64
	CostUSD                 float64
	Requests                int
	MaxTokens               int64
	MaxCostUSD              float64
}

func resultOf(r workflows.TaskResult) TaskResult {
	out := TaskResult{TaskID: r.TaskID, WorkflowID: r.WorkflowID, Status: Status(r.Status), FailureCode: string(r.FailureCode),
		Message: r.Message, Answer: r.FinalText, Model: r.Model, Operations: operationsOf(r.Operations)}
	for _, d := range r.Deliveries {
		out.Deliveries = append(out.Deliveries, Delivery{OperationID: d.OperationID, Target: d.Target, Outcome: d.State, ExternalID: d.ExternalID})
	}
	if s := r.Spend; s != nil {
		out.Spend = Spend{Tokens: s.Tokens, EstimatedTokens: s.EstimatedTokens, CostUSD: s.CostUSD, Requests: s.Requests,
			MaxTokens: s.MaxTokens, MaxCostUSD: s.MaxCostUSD}
	}
	return out
}

func operationsOf(ops []workflows.OperationRecord) []Operation {
	out := make([]Operation, 0, len(ops))
	for _, o := range ops {
		op := Operation{ID: o.OperationID, Tool: o.Tool, Outcome: o.State, ExternalID: o.ExternalID, Replayed: o.Replayed,
			Recovered: o.Recovered, Reason: o.Reason, PolicyRule: o.PolicyRule, Summary: o.Summary, CallHash: o.CallHash,
			ResolvedBy: o.ResolvedBy}
		if a := o.Approval; a != nil {
			op.Approval, op.ApprovedBy = a.Decision, a.By
		}
		out = append(out, op)
	}
	return out
}

// Wait waits for the task to end and returns its result, whether it
// completed, failed or was cancelled; the error is for a result it could
// not get (ctx ended, the server is gone).
func (k *Task) Wait(ctx context.Context) (TaskResult, error) {
	var res workflows.TaskResult
	err := k.c.GetWorkflow(ctx, k.wid, "").Get(ctx, &res)
	if err == nil {
		return resultOf(res), nil
	}
	if ctx.Err() != nil {
		return TaskResult{}, fmt.Errorf("task %s: %w", k.id, ctx.Err())
	}
	// Failures and cancellations carry the result as their details.
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&res) == nil {
		return resultOf(res), nil
	}
	var canErr *temporal.CanceledError
	if errors.As(err, &canErr) && canErr.HasDetails() && canErr.Details(&res) == nil {
		return resultOf(res), nil
	}
	status := StatusFailed
	if canErr != nil {
		status = StatusCancelled
	}
	return TaskResult{TaskID: k.id, WorkflowID: k.wid, Status: status, Message: err.Error()}, nil
}

// Result is the task's result so far: asked of the running task (its
// status query, which needs a worker), or its result once it ended, as
// `starter status` reads it.
func (k *Task) Result(ctx context.Context) (TaskResult, error) {
	desc, err := k.c.DescribeWorkflowExecution(ctx, k.wid, "")
	if err != nil {
		return TaskResult{}, fmt.Errorf("task %s: %w", k.id, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return k.Wait(ctx)
	}
	v, err := k.c.QueryWorkflow(ctx, k.wid, "", workflows.QueryStatus)
	if err != nil {
		return TaskResult{}, fmt.Errorf("ask task %s for its status (is a worker running?): %w", k.id, err)
	}
	var res workflows.TaskResult
	if err := v.Get(&res); err != nil {
		return TaskResult{}, fmt.Errorf("decode the status of task %s: %w", k.id, err)
	}
	return resultOf(res), nil
}

// Operations are the task's operations so far, oldest first (see
// [Task.Result]).
func (k *Task) Operations(ctx context.Context) ([]Operation, error) {
	res, err := k.Result(ctx)
	return res.Operations, err
}

// WaitFor asks the task for its operations every 100ms until cond holds
// of them, and returns them; it fails when ctx ends or the task ends
// before cond holds.
func (k *Task) WaitFor(ctx context.Context, cond func([]Operation) bool) ([]Operation, error) {
	for {
		res, err := k.Result(ctx)
		if err == nil && cond(res.Operations) {
			return res.Operations, nil
		}
		if err == nil && res.Status != StatusRunning && res.Status != StatusNeedsHuman {
			return res.Operations, fmt.Errorf("task %s ended %s before the condition held", k.id, res.Status)
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return res.Operations, fmt.Errorf("task %s: waiting for a condition: %w", k.id, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitForOutcome waits (as WaitFor) until an operation of the task has
// outcome, for example [capstan.OutcomeAwaitingApproval] or
// [capstan.OutcomeNeedsHuman], and returns the first such.
func (k *Task) WaitForOutcome(ctx context.Context, outcome capstan.Outcome) (Operation, error) {
	ops, err := k.WaitFor(ctx, func(ops []Operation) bool {
		return slices.ContainsFunc(ops, func(o Operation) bool { return o.Outcome == outcome })
	})
	if err != nil {
		return Operation{}, err
	}
	i := slices.IndexFunc(ops, func(o Operation) bool { return o.Outcome == outcome })
	return ops[i], nil
}

// approver is who capstantest's answers are recorded as given by.
const approver = "capstantest"

// Approve approves the operation opID that awaits approval, bound to the
// call it awaits with (its CallHash, as `starter approve --hash` sends
// it): that call is sent, exactly once. The error is the task's refusal.
func (k *Task) Approve(ctx context.Context, opID string) error {
	ops, err := k.Operations(ctx)
	if err != nil {
		return err
	}
	hash := ""
	for _, o := range ops {
		if o.ID == opID || strings.HasSuffix(o.ID, ":"+opID) {
			hash = o.CallHash
		}
	}
	req := workflows.ApprovalRequest{OperationID: opID, By: approver, Hash: hash, Client: approver}
	var res workflows.ApprovalResult
	return k.update(ctx, workflows.UpdateApprove, req, &res)
}

// Deny refuses the operation opID that awaits approval: nothing is sent,
// and the model reads reason.
func (k *Task) Deny(ctx context.Context, opID, reason string) error {
	req := workflows.ApprovalRequest{OperationID: opID, By: approver, Reason: reason, Client: approver}
	var res workflows.ApprovalResult
	return k.update(ctx, workflows.UpdateDeny, req, &res)
}

// ResolveFound settles the operation opID that needs a person as having
// taken effect, url naming what was found (as `starter resolve --found`).
func (k *Task) ResolveFound(ctx context.Context, opID, url string) error {
	var res workflows.ResolveResult
	return k.update(ctx, workflows.UpdateResolve,
		workflows.ResolveRequest{OperationID: opID, Decision: workflows.DecisionFound, URL: url, ResolvedBy: approver}, &res)
}

// ResolveAbsent settles the operation opID that needs a person as not
// having taken effect: capstan executes it again under the same
// operation id (as `starter resolve --absent`).
func (k *Task) ResolveAbsent(ctx context.Context, opID string) error {
	var res workflows.ResolveResult
	return k.update(ctx, workflows.UpdateResolve,
		workflows.ResolveRequest{OperationID: opID, Decision: workflows.DecisionAbsent, ResolvedBy: approver}, &res)
}

// update sends the task's update and waits until the task took it.
func (k *Task) update(ctx context.Context, name string, req, res any) error {
	h, err := k.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: k.wid, UpdateName: name, Args: []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, res)
	}
	if err != nil {
		return fmt.Errorf("task %s refused the %s: %w", k.id, name, err)
	}
	return nil
}
