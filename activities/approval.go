package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/tools"
)

// This file is ExecuteTool's side of approvals (docs/design.md §5.9). A
// call the task's policy decides require_approval, in a task that can ask
// a person (ExecuteToolInput.Approvals), is not sent until a person
// approves it:
//
//   - without an approval or a denial in its input, ExecuteTool claims
//     nothing, sends nothing, commits nothing, and returns State
//     awaiting_approval with a one-line summary of what the call would do
//     and its effect's name; the workflow asks a person;
//   - with an approval (Approval), the decision lets the call through, and
//     it is claimed and sent as any allowed call: the ledger's claim makes
//     the send exactly-once, whichever worker runs it, however often;
//   - with a denial (Denial), nothing is claimed or sent, the denial and
//     its reason are committed as the tool message the model reads, and
//     State is denied. A denial is no policy refusal: the workflow does
//     not count it toward the refusal limit.

// approvalGate settles a require_approval decision d on the call in as the
// ledger records it: a refusal in a task that cannot ask a person, else a
// call that waits (not refused).
func approvalGate(in contract.ExecuteToolInput, d *contract.PolicyDecision) {
	if in.Approvals {
		d.Refused = false
	} else {
		d.Reason += awaitingApproval
	}
}

// approvedBy lets through the call in, whose recorded decision d waits for
// a person, when in carries the person's approval. The ledger keeps the
// policy's decision (require_approval), not the answer: the answer is the
// workflow's, in its history, and comes with every call that needs it.
func approvedBy(in contract.ExecuteToolInput, d *contract.PolicyDecision) {
	if in.Approvals && in.Approval != nil && d.Effect == requireApproval && !d.Refused {
		d.Approved = true
	}
}

// requireApproval is the policy effect that asks a person.
const requireApproval = "require_approval"

// awaits is whether decision d leaves the call waiting for a person.
func awaits(d *contract.PolicyDecision) bool {
	return d != nil && !d.Refused && !d.Approved && d.Effect == requireApproval
}

// awaiting is the result of a call that waits for a person's approval:
// nothing was claimed, sent or committed.
func awaiting(in contract.ExecuteToolInput, tool tools.Tool, args json.RawMessage, id tools.Identity, res contract.ExecuteToolResult) contract.ExecuteToolResult {
	sum := approvalSummary(tool, args)
	res.State, res.Preview = capstan.OutcomeAwaitingApproval, preview("awaiting approval: "+sum)
	res.Awaiting = &contract.AwaitingApproval{Summary: sum, Effect: RequestHash(in.Tool, id.Effect)}
	return res
}

// denied commits the tool message of a call a person denied, or whose
// approval timed out: nothing was claimed or sent.
func (a *Activities) denied(ctx context.Context, in contract.ExecuteToolInput, res contract.ExecuteToolResult) (contract.ExecuteToolResult, error) {
	by := ""
	if in.Denial.By != "" {
		by = " by " + in.Denial.By
	}
	res, err := a.refused(ctx, in, res, fmt.Errorf("%s was denied%s: %s. Nothing was sent; do not ask for it again", in.Tool, by, in.Denial.Reason))
	if err == nil {
		res.State = capstan.OutcomeDenied
	}
	return res, err
}

// approvalSummary is one line saying what the call would do, and where,
// for the person asked to approve it: "pull request capstan/x → main in
// acme/payments". A tool that does not say what it targets is named by
// its own summary.
func approvalSummary(tool tools.Tool, args json.RawMessage) string {
	tg, ok := tool.(tools.Targeted)
	if !ok {
		return tool.Summary(args)
	}
	t, err := tg.Target(args)
	if err != nil || t.Repository == "" {
		return tool.Summary(args)
	}
	switch {
	case t.Into != "":
		return fmt.Sprintf("pull request %s → %s in %s", t.Branch, t.Into, t.Repository)
	case t.CreatesBranch:
		return fmt.Sprintf("branch %s from %s in %s", t.Branch, t.From, t.Repository)
	case t.Path != "" && tool.Class() != tools.ReadOnly:
		return fmt.Sprintf("write %s on %s in %s", t.Path, t.Branch, t.Repository)
	default:
		return tool.Summary(args) + " (" + string(tool.Class()) + ")"
	}
}
