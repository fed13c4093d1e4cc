package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/tool"
)

// This file is the task's policy at the tool boundary (docs/design.md
// §5.8): ExecuteTool decides every call against the policy the task was
// started with (contract.TaskPolicy, in its input) before anything is
// claimed or sent, and records the decision in the ledger once per
// operation (ledger.Decision): a repeated call of the operation gets the
// recorded decision. A refusal is a tool error the model reads; nothing is
// claimed or sent, and its decision goes back to the workflow in the
// activity's result, which journals it and counts it toward the task's
// refusal limit.

// awaitingApproval is what a require_approval decision adds to its reason
// in a task that cannot ask a person (started before approvals), which
// refuses the call.
const awaitingApproval = "; it needs a person's approval, which this task cannot ask for, so it was refused"

// decide is the task's policy's decision on the call of tool with args
// (which Identify accepted), not yet recorded; nil when the task has no
// policy context (started before changePolicyAtToolBoundary). Its only
// I/O is loading a policy this worker has not compiled yet (compiled).
func (a *Activities) decide(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage) (*contract.PolicyDecision, error) {
	if in.Policy == nil {
		return nil, nil
	}
	if err := a.checkApprovalNames(in.Policy); err != nil {
		return nil, err
	}
	p, err := a.compiled(ctx, in.Policy)
	if err != nil {
		return nil, err
	}
	c := policy.Call{Tool: impl.Name(), Class: impl.Class(), Server: toolServer(impl), Writes: impl.Class() != tool.ReadOnly}
	if tg, ok := impl.(tool.Targeted); ok {
		t, err := tg.Target(args)
		if err != nil {
			return nil, err
		}
		c.Repository, c.Branch, c.Path, c.From, c.Into, c.CreatesBranch = t.Repository, t.Branch, t.Path, t.From, t.Into, t.CreatesBranch
		c.Attributes = t.Attributes
	}
	task := policyTask(in.Policy)
	if task.DefaultBranch, err = a.defaultBranch(ctx, c, in.Policy); err != nil {
		return nil, err
	}
	if c.WritesOnto() {
		if task.CreatedBranches, err = a.createdBranches(ctx, in); err != nil {
			return nil, err
		}
	}
	d := policy.Stack{Floor: a.Floor, Task: p}.Decide(c, task)
	out := &contract.PolicyDecision{Effect: string(d.Effect), Rule: d.Rule, Reason: d.Reason, Layer: d.Layer, Refused: !d.Allowed()}
	if d.NeedsApproval() {
		approvalGate(in, out)
	}
	return out, nil
}

// recordDecision records d as the decision on the operation in the ledger,
// once: when the operation has one already (a repeated ExecuteTool), that
// one is the decision, whatever the policy says now. Only a new record is
// counted in capstan_policy_decisions_total.
func (a *Activities) recordDecision(ctx context.Context, in contract.ExecuteToolInput, d *contract.PolicyDecision) (*contract.PolicyDecision, error) {
	stored, created, err := a.Ledger.RecordDecision(ctx, ledgerDecision(in, d))
	if err != nil {
		return nil, fmt.Errorf("record the policy's decision on operation %s: %w", in.OperationID, err)
	}
	if created {
		a.Metrics.PolicyDecision(stored.Effect, stored.Rule)
	}
	return policyDecision(stored), nil
}

// ledgerDecision is d as the ledger records it on in's operation.
func ledgerDecision(in contract.ExecuteToolInput, d *contract.PolicyDecision) ledger.Decision {
	return ledger.Decision{OperationID: in.OperationID, Tenant: in.Tenant, TaskID: in.TaskID, Tool: in.Tool,
		Effect: d.Effect, Rule: d.Rule, Reason: d.Reason, Layer: d.Layer, Refused: d.Refused}
}

// policyDecision is a recorded decision as ExecuteTool's result carries it.
func policyDecision(d ledger.Decision) *contract.PolicyDecision {
	return &contract.PolicyDecision{Effect: d.Effect, Rule: d.Rule, Reason: d.Reason, Layer: d.Layer, Refused: d.Refused}
}

// admit has the task's policy decide the call before anything is claimed
// or sent, and puts the decision in res. A decision that lets the call go
// on to its claim is not recorded here but returned as pending, for the
// claim to record in its own write (ledger.ClaimRequest.Decision): one
// durable write, not two, and the decision is still durable before
// anything is sent. Any other decision is recorded at once (the ledger may
// hold an earlier one, which then stands) and abided by (abide). stop says
// the call goes no further: res (or err) is the answer.
func (a *Activities) admit(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, id tool.Identity, res contract.ExecuteToolResult) (pending *ledger.Decision, _ contract.ExecuteToolResult, stop bool, err error) {
	fresh, err := a.decide(ctx, in, impl, args)
	if err != nil || fresh == nil {
		return nil, res, err != nil, err
	}
	if through := *fresh; !through.Refused {
		if approvedBy(in, &through); !awaits(&through) {
			d := ledgerDecision(in, fresh)
			res.Decision = &through
			return &d, res, false, nil
		}
	}
	stored, err := a.recordDecision(ctx, in, fresh)
	if err != nil {
		return nil, res, true, err
	}
	res, stop, err = a.abide(ctx, in, impl, args, id, res, stored)
	return nil, res, stop, err
}

// abide puts the recorded decision d on the call in res and acts on it:
// a refusal is committed as the tool message the model reads, and a call
// that waits for a person is answered as awaiting; stop says either
// happened. A call d lets through (stop false) goes on to its claim.
func (a *Activities) abide(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, id tool.Identity, res contract.ExecuteToolResult, d *contract.PolicyDecision) (contract.ExecuteToolResult, bool, error) {
	approvedBy(in, d)
	res.Decision = d
	if d.Refused {
		res, err := a.refused(ctx, in, res, policyRefusal(in.Tool, d))
		return res, true, err
	}
	if awaits(d) {
		res, stop, held, err := a.sentBefore(ctx, in, impl, args, res)
		if through := held != ""; stop || through || err != nil {
			return res, !through || err != nil, err
		}
		res, err = awaiting(in, impl, args, id, res)
		return res, true, err
	}
	return res, false, nil
}

// decidedOtherwise is begin's answer when the claim carried a decision
// and the ledger holds another on the operation, which stands
// (ledger.DecidedOtherwise): nothing was claimed.
type decidedOtherwise struct{ stored ledger.Decision }

func (e *decidedOtherwise) Error() string {
	return fmt.Sprintf("operation %s already has the policy's decision %s by %s", e.stored.OperationID, e.stored.Effect, e.stored.Rule)
}

// offered are the tools offered to the model: every registered one but
// those the task's policy refuses whatever their arguments
// (policy.Stack.AlwaysRefused), which only a policy file's rules can do:
// the worker's own or the task's. A
// context that carries the file's text under a reference (the chain's first
// turn, changePolicyByReference) has the text stored with the turn's
// commit (pending), where every later call finds it. Its policy is
// compiled as ExecuteTool's is (compiled): one that does not compile fails
// the turn worker_misconfigured, naming the rule and the line, as it would
// fail the task's first tool call; so does one that names a tool this
// worker does not have, in a rule or a --require-approval (compiled,
// checkApprovalNames).
func (a *Activities) offered(ctx context.Context, tp *contract.TaskPolicy, pending *pendingItems) ([]model.ToolSpec, error) {
	specs := a.Tools.Specs()
	if tp == nil {
		return specs, nil
	}
	if err := a.checkApprovalNames(tp); err != nil {
		return nil, err
	}
	if !contract.HasPolicyText(tp) && tp.SourceRef == "" && a.Floor == nil {
		return specs, nil
	}
	if contract.HasPolicyText(tp) && tp.SourceRef != "" {
		pending.add(contract.PolicyItem(tp.File, tp.Source))
	}
	p, err := a.compiled(ctx, tp)
	if err != nil {
		return nil, err
	}
	out := make([]model.ToolSpec, 0, len(specs))
	for _, s := range specs {
		if impl, err := a.Tools.Get(s.Name); err == nil {
			if _, refused := (policy.Stack{Floor: a.Floor, Task: p}).AlwaysRefused(s.Name, impl.Class(), toolServer(impl), policyTask(tp)); refused {
				continue
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// defaultBranch is the default branch of the repository a write goes to,
// when it is one of the task's (a write elsewhere is refused by
// default/repository whatever its branch, unless the worker's file may
// lift a default): read before the write is
// decided, through the worker's cache (Deps.DefaultBranches), and before a
// read that names HEAD, which stands for it. "" for another read, or when
// the worker cannot read default branches.
func (a *Activities) defaultBranch(ctx context.Context, c policy.Call, tp *contract.TaskPolicy) (string, error) {
	if a.DefaultBranches == nil || !(c.Writes || policy.NamesHead(c, tp.Base)) || c.Repository == "" {
		return "", nil
	}
	if len(a.Floor.Overrides()) == 0 && !slices.ContainsFunc(tp.Repositories, func(r string) bool {
		return strings.EqualFold(r, c.Repository)
	}) {
		return "", nil // refused by default/repository, which nothing lifts
	}
	return a.DefaultBranches.DefaultBranch(ctx, c.Repository)
}

// policyTask is what the policy knows of the task when it starts.
func policyTask(tp *contract.TaskPolicy) policy.Task {
	return policy.Task{Repositories: tp.Repositories, Base: tp.Base, BranchPrefix: tp.BranchPrefix, Tenant: tp.Tenant, Labels: tp.Labels,
		RequireApproval: tp.RequireApproval, AllowBranches: tp.AllowBranches}
}

// createdBranches are the branches the task of in has created, as the
// ledger records them (policy.Task.CreatedBranches, default/own-branch):
// its operations of a tool.BranchCreator that succeeded — sent and
// answered, or found by a reconciliation or a person — in any run of its
// chain (continue-as-new and reset keep the chain's scope, which its
// operation ids carry), never those of another chain that reused the task
// id. Read before a write onto a branch is decided; a ledger that cannot
// answer is an error Temporal retries, nothing sent.
func (a *Activities) createdBranches(ctx context.Context, in contract.ExecuteToolInput) ([]policy.Branch, error) {
	ops, err := a.Ledger.ListByTask(ctx, in.TaskID)
	if err != nil {
		return nil, fmt.Errorf("read the branches task %s created: %w", in.TaskID, err)
	}
	var out []policy.Branch
	for _, op := range ops {
		if op.State != capstan.OutcomeSucceeded || op.Tenant != in.Tenant || !ofChain(op.ID, in) {
			continue
		}
		impl, err := a.Tools.Get(op.Kind)
		if err != nil {
			continue // not a tool of this worker's
		}
		if bc, ok := impl.(tool.BranchCreator); ok {
			if t, ok := bc.CreatedBranch(op.BusinessKey); ok {
				out = append(out, policy.Branch{Repository: t.Repository, Name: t.Branch})
			}
		}
	}
	return out, nil
}

// ofChain is whether operation id belongs to the chain of in: it carries
// the chain's scope after the task id; for a task started before keys were
// scoped, it carries none.
func ofChain(id string, in contract.ExecuteToolInput) bool {
	if in.Scope == "" {
		return !strings.Contains(id, ":"+in.TaskID+":~")
	}
	return strings.Contains(id, ledger.Chain{TaskID: in.TaskID, Scope: in.Scope}.OperationMark())
}

// compiled is the task's policy, compiled once per worker for each policy
// file (cached by its reference, ledger.ItemRef of contract.PolicyItem):
// the defaults alone when the task has no file. A context that names the
// file by SourceRef without its text (changePolicyByReference) has it
// loaded from the ledger on this worker's first call. A file that does not
// compile, or cannot be found, is a worker_misconfigured error; ledger
// trouble is an error Temporal retries.
func (a *Activities) compiled(ctx context.Context, tp *contract.TaskPolicy) (*policy.Policy, error) {
	if !contract.HasPolicyText(tp) && tp.SourceRef == "" {
		return policy.Builtin(), nil
	}
	key := tp.SourceRef
	if key == "" {
		key = ledger.ItemRef(contract.PolicyItem(tp.File, tp.Source))
	}
	if p, ok := a.policies.Load(key); ok {
		return p.(*policy.Policy), nil
	}
	file, source, err := a.policyText(ctx, tp, key)
	if err != nil {
		return nil, err
	}
	p, err := policy.Parse(file, []byte(source))
	if err != nil {
		err = fmt.Errorf("the task's policy, which its starter accepted, does not compile on this worker: %w", err)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, err)
	}
	if err := p.CheckTools(a.Tools.Names()); err != nil {
		err = fmt.Errorf("the task's policy names a tool this worker does not have: %w", err)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, err)
	}
	a.policies.Store(key, p)
	return p, nil
}

// checkApprovalNames refuses a task whose --require-approval names neither
// a class nor a tool this worker has (an MCP tool by its registered name):
// it would fail open, asking for no approval at all. It is
// worker_misconfigured, as a policy that does not compile here.
func (a *Activities) checkApprovalNames(tp *contract.TaskPolicy) error {
	if err := policy.CheckApprovalNames(tp.RequireApproval, a.Tools.Names()); err != nil {
		err = fmt.Errorf("the task's %w", err)
		return temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, err)
	}
	return nil
}

// policyText is the name and text of the task's policy file: from its
// context, or from the ledger item key names.
func (a *Activities) policyText(ctx context.Context, tp *contract.TaskPolicy, key string) (string, string, error) {
	if contract.HasPolicyText(tp) {
		if tp.SourceRef != "" && ledger.ItemRef(contract.PolicyItem(tp.File, tp.Source)) != tp.SourceRef {
			msg := fmt.Sprintf("the task's policy file %s does not match its reference %s", tp.File, tp.SourceRef)
			return "", "", temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeWorkerConfig, nil)
		}
		return tp.File, tp.Source, nil
	}
	data, err := a.Ledger.GetItem(ctx, key)
	if errors.Is(err, ledger.ErrNotFound) {
		msg := fmt.Sprintf("the task's policy file %s (%s) is not in the ledger; its first turn stores it, so that turn ran on a worker older than this one", tp.File, key)
		return "", "", temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeWorkerConfig, err)
	}
	if err != nil {
		return "", "", fmt.Errorf("load the task's policy file %s: %w", tp.File, err)
	}
	file, source, err := contract.ParsePolicyItem(data)
	if err != nil {
		return "", "", temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, err)
	}
	return file, source, nil
}

// policyRefusal is the tool error of a call the policy refused: the rule,
// and its reason, which says what is allowed.
func policyRefusal(toolName string, d *contract.PolicyDecision) error {
	return fmt.Errorf("%s was refused by %s: %s. Nothing was sent", toolName, d.Rule, d.Reason)
}
