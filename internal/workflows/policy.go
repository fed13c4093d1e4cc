package workflows

import (
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
)

// This file is the workflow's side of the task's policy (docs/design.md
// §5.8, changePolicyAtToolBoundary): the context fixed as the chain starts,
// given to every ExecuteTool, which decides before anything is sent; each
// decision it reports journalled; the refusals counted against the task's
// limit.

// startPolicy reads changePolicyAtToolBoundary as the chain's first run
// starts and, when it holds, fixes the task's policy context in its input
// (carried by every continue-as-new): the starter's, or for a task started
// without one, the defaults' context from its Repo, Comments, Base and
// Tenant.
func (t *task) startPolicy(ctx workflow.Context) {
	if !t.since(ctx, changePolicyAtToolBoundary) {
		return
	}
	t.policy = true
	if t.in.Policy == nil {
		t.in.Policy = derivedPolicy(t.in)
	}
	tp := t.in.Policy
	if tp.Source != "" && tp.SourceRef == "" &&
		t.since(ctx, changePolicyByReference) {
		tp.SourceRef = ledger.ItemRef(contract.PolicyItem(tp.File, tp.Source))
	}
}

// derivedPolicy is the policy context of a task whose starter set none:
// its repository and those of its comments, its base branch and tenant,
// the default prefix and refusal limit, no file.
func derivedPolicy(in AgentTaskInput) *contract.TaskPolicy {
	tp := &contract.TaskPolicy{Base: in.Base, Tenant: in.Tenant}
	if tp.Base == "" {
		tp.Base = config.DefaultBaseBranch
	}
	seen := map[string]bool{}
	for _, r := range append([]string{in.Repo}, commentRepos(in.Comments)...) {
		if r != "" && !seen[strings.ToLower(r)] {
			seen[strings.ToLower(r)] = true
			tp.Repositories = append(tp.Repositories, r)
		}
	}
	return tp
}

func commentRepos(cs []contract.CommentTarget) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Repo)
	}
	return out
}

// toolPolicy is the policy context ExecuteTool decides with, and ModelTurn
// offers tools with; nil for a chain started before
// changePolicyAtToolBoundary. Under changePolicyByReference it names the
// file's text by SourceRef without carrying it (firstTurnPolicy does).
func (t *task) toolPolicy() *contract.TaskPolicy {
	if !t.policy {
		return nil
	}
	if t.in.Policy.SourceRef == "" {
		return t.in.Policy
	}
	tp := *t.in.Policy
	tp.Source = contract.PolicyPlaceholder(tp.SourceRef)
	return &tp
}

// firstTurnPolicy is the policy context of the chain's first turn's
// ModelTurn inputs: the whole context, the file's text included, which the
// activity stores with the turn's commit under SourceRef, before any call
// can need it.
func (t *task) firstTurnPolicy() *contract.TaskPolicy {
	if !t.policy {
		return nil
	}
	return t.in.Policy
}

// maxRefusals is the task's refusal limit.
func (t *task) maxRefusals() int {
	if t.in.Policy != nil && t.in.Policy.MaxRefusals > 0 {
		return t.in.Policy.MaxRefusals
	}
	return config.DefaultPolicyRefusals
}

// refusals counts the task's operations its policy refused, in every run
// of the chain.
func (t *task) refusals() int {
	n := 0
	for _, op := range t.result.Operations {
		if op.PolicyRule != "" {
			n++
		}
	}
	return n
}

// policyDecided journals the decision ExecuteTool reported for op and, for
// a refusal, records the rule on the operation and fails the task
// policy_violation when its refusals reach the limit. A result without a
// decision (a chain without a policy context) changes nothing.
func (t *task) policyDecided(ctx workflow.Context, op declared, rec *OperationRecord, d *contract.PolicyDecision) error {
	if d == nil || !t.policy {
		return nil
	}
	t.note(ctx, "policy: %s %s by %s: %s", op.call.Name, d.Effect, d.Rule, d.Reason)
	if !d.Refused {
		return nil
	}
	rec.State, rec.PolicyRule, rec.Reason = capstan.OutcomeFailed, d.Rule, "refused by "+d.Rule+": "+d.Reason
	if n, limit := t.refusals(), t.maxRefusals(); n >= limit {
		return fail(FailPolicyViolation, "the task's policy refused %d of its tool calls, its limit (--max-refusals, CAPSTAN_POLICY_REFUSALS); the last: %s refused by %s: %s",
			n, op.call.Name, d.Rule, d.Reason)
	}
	return nil
}
