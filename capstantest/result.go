package capstantest

import (
	"context"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

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
	// TaskID and WorkflowID name the task.
	TaskID, WorkflowID string
	// Status is running (or needs_human) while it runs, then completed,
	// failed or cancelled.
	Status Status
	// FailureCode says why a failed task failed (budget_exhausted,
	// policy_violation, max_turns, …).
	FailureCode string
	// Message says in words how the task ended.
	Message string
	// Answer is the model's final text.
	Answer string
	// Model is the provider:model the task ended on.
	Model string
	// Operations are the task's tool calls' operations, oldest first.
	Operations []Operation
	// Deliveries are the deliveries of the final answer.
	Deliveries []Delivery
	// Spend is what the task's model requests spent.
	Spend Spend
}

// Operation is one tool call's operation, as the task records it (its
// status query, what `starter status` shows). The task's record holds no
// safety class nor attempt count: those live in the worker's ledger.
type Operation struct {
	// ID is the operation's id, what Approve, Deny and ResolveFound take.
	ID string
	// Tool is the tool's name.
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
	// OperationID is the delivery's operation id.
	OperationID string
	// Target is where it goes: a Slack channel or OWNER/NAME#N.
	Target string
	// Outcome is what is known of it, as of an operation.
	Outcome capstan.Outcome
	// ExternalID names the message or comment posted.
	ExternalID string
}

// Spend is what a task's model requests spent, against its budget.
type Spend struct {
	// Tokens are the input plus output tokens spent; EstimatedTokens
	// the part of them estimated for requests that reported no usage.
	Tokens, EstimatedTokens int64
	// CostUSD prices Tokens by the worker's price table.
	CostUSD float64
	// Requests counts the model requests that spent something.
	Requests int
	// MaxTokens is the task's token budget.
	MaxTokens int64
	// MaxCostUSD is the task's cost budget; 0 for none.
	MaxCostUSD float64
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
	res, err := taskstart.AwaitResult(ctx, k.c, k.wid, "")
	if err != nil {
		return TaskResult{}, fmt.Errorf("task %s: %w", k.id, err)
	}
	return resultOf(res), nil
}

// Result is the task's result so far: asked of the running task (its
// status query, which needs a worker), or its result once it ended, as
// `starter status` reads it.
func (k *Task) Result(ctx context.Context) (TaskResult, error) {
	desc, err := k.c.DescribeWorkflow(ctx, k.wid, "")
	if err != nil {
		return TaskResult{}, fmt.Errorf("task %s: %w", k.id, err)
	}
	if desc.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
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

// Approve approves the operation opID (its id, or an ending of it at a
// ":", as the starter takes it) that awaits approval, bound to the
// call it awaits with (its CallHash, as `starter approve --hash` sends
// it): that call is sent, exactly once. The error is the task's refusal.
func (k *Task) Approve(ctx context.Context, opID string) error {
	ops, err := k.Operations(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, len(ops))
	for i, o := range ops {
		ids[i] = o.ID
	}
	id, err := workflows.MatchOperation(ids, opID)
	if err != nil {
		return fmt.Errorf("task %s has %w", k.id, err)
	}
	hash := ops[slices.Index(ids, id)].CallHash
	req := workflows.ApprovalRequest{OperationID: id, By: approver, Hash: hash, Client: approver}
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
