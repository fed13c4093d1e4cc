package activities

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/tools"
)

// This file is the task's policy at the tool boundary (docs/design.md
// §5.8): ExecuteTool decides every call against the policy the task was
// started with (contract.TaskPolicy, in its input) before anything is
// claimed or sent. A refusal is a tool error the model reads; it leaves no
// ledger row (nothing was claimed), and its decision goes back to the
// workflow in the activity's result, which journals it and counts it
// toward the task's refusal limit.

// awaitingApproval is what a require_approval decision adds to its reason:
// this version cannot ask a person yet, so it refuses the call.
const awaitingApproval = "; it needs a person's approval, which this version cannot ask for yet, so it was refused"

// decide is the task's policy's decision on the call of tool with args
// (which Identify accepted), counted in capstan_policy_decisions_total; nil
// when the task has no policy context (started before
// changePolicyAtToolBoundary). It does no I/O.
func (a *Activities) decide(in contract.ExecuteToolInput, tool tools.Tool, args json.RawMessage) (*contract.PolicyDecision, error) {
	if in.Policy == nil {
		return nil, nil
	}
	p, err := a.compiled(in.Policy)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, err)
	}
	c := policy.Call{Tool: tool.Name(), Class: tool.Class(), Server: toolServer(tool), Writes: tool.Class() != tools.ReadOnly}
	if tg, ok := tool.(tools.Targeted); ok {
		t, err := tg.Target(args)
		if err != nil {
			return nil, err
		}
		c.Repository, c.Branch, c.Path, c.From, c.Into, c.CreatesBranch = t.Repository, t.Branch, t.Path, t.From, t.Into, t.CreatesBranch
	}
	d := p.Decide(c, policyTask(in.Policy))
	a.Metrics.PolicyDecision(string(d.Effect), d.Rule)
	out := &contract.PolicyDecision{Effect: string(d.Effect), Rule: d.Rule, Reason: d.Reason, Refused: !d.Allowed()}
	if d.NeedsApproval() {
		out.Reason += awaitingApproval
	}
	return out, nil
}

// admit has the task's policy decide the call before anything is claimed
// or sent, and puts the decision in res. When it refuses the call, the
// refusal is committed as the tool message the model reads, and admit
// returns the result to give, with refused true.
func (a *Activities) admit(ctx context.Context, in contract.ExecuteToolInput, tool tools.Tool, args json.RawMessage, res contract.ExecuteToolResult) (contract.ExecuteToolResult, bool, error) {
	var err error
	if res.Decision, err = a.decide(in, tool, args); err != nil {
		return res, true, err
	}
	if res.Decision == nil || !res.Decision.Refused {
		return res, false, nil
	}
	res, err = a.refused(ctx, in, res, policyRefusal(in.Tool, res.Decision))
	return res, true, err
}

// offered are the tools offered to the model: every registered one but
// those the task's policy refuses whatever their arguments
// (policy.AlwaysRefused), which only a policy file's rules can do. A
// policy that does not compile offers every tool; ExecuteTool then fails
// the task worker_misconfigured on its first call.
func (a *Activities) offered(tp *contract.TaskPolicy) []model.ToolSpec {
	specs := a.Tools.Specs()
	if tp == nil || tp.Source == "" {
		return specs
	}
	p, err := a.compiled(tp)
	if err != nil {
		return specs
	}
	out := make([]model.ToolSpec, 0, len(specs))
	for _, s := range specs {
		if tool, err := a.Tools.Get(s.Name); err == nil {
			if _, refused := p.AlwaysRefused(s.Name, tool.Class(), toolServer(tool), policyTask(tp)); refused {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// policyTask is what the policy knows of the task.
func policyTask(tp *contract.TaskPolicy) policy.Task {
	return policy.Task{Repositories: tp.Repositories, Base: tp.Base, BranchPrefix: tp.BranchPrefix, Tenant: tp.Tenant, Labels: tp.Labels}
}

// compiled is the task's policy, compiled once per worker for each policy
// text (by its hash): the defaults alone when the task has no file.
func (a *Activities) compiled(tp *contract.TaskPolicy) (*policy.Policy, error) {
	if tp.Source == "" {
		return policy.Builtin(), nil
	}
	key := sha256.Sum256([]byte(tp.File + "\x00" + tp.Source))
	if p, ok := a.policies.Load(key); ok {
		return p.(*policy.Policy), nil
	}
	p, err := policy.Parse(tp.File, []byte(tp.Source))
	if err != nil {
		return nil, fmt.Errorf("the task's policy, which its starter accepted, does not compile on this worker: %w", err)
	}
	a.policies.Store(key, p)
	return p, nil
}

// policyRefusal is the tool error of a call the policy refused: the rule,
// and its reason, which says what is allowed.
func policyRefusal(toolName string, d *contract.PolicyDecision) error {
	return fmt.Errorf("%s was refused by %s: %s. Nothing was sent", toolName, d.Rule, d.Reason)
}
