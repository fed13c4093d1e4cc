package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/tool"
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
func awaiting(in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, id tool.Identity, res contract.ExecuteToolResult) (contract.ExecuteToolResult, error) {
	sum := approvalSummary(impl, args)
	_, hash, err := contract.CanonicalCall(in.Tool, args)
	if err != nil {
		return res, err
	}
	fields, err := contract.CallFields(args, contract.CallFieldCap, contract.CallFieldsShown)
	if err != nil {
		return res, err
	}
	res.State, res.Preview = capstan.OutcomeAwaitingApproval, preview("awaiting approval: "+sum)
	res.Awaiting = &contract.AwaitingApproval{Summary: sum, Effect: RequestHash(in.Tool, id.Effect),
		Hash: hash, Call: fields, Arguments: in.Arguments}
	return res, nil
}

// approvedOtherCall refuses, before anything is claimed or sent, a call
// whose approval names another canonical call than this one (its hash):
// the person approved what they were shown, and only that is sent. An
// approval without a hash (given before approvals were bound to the call)
// binds to nothing. It returns nil when the call may go on.
func approvedOtherCall(in contract.ExecuteToolInput, args json.RawMessage) error {
	if in.Approval == nil || in.Approval.Hash == "" {
		return nil
	}
	_, hash, err := contract.CanonicalCall(in.Tool, args)
	if err != nil {
		return err
	}
	if hash != in.Approval.Hash {
		return fmt.Errorf("%s was approved by %s as the call with sha256 %s, but this call's sha256 is %s. Nothing was sent",
			in.Tool, in.Approval.By, in.Approval.Hash, hash)
	}
	return nil
}

// sentBefore is what the ledger says of an operation about to be asked
// for or denied (docs/design.md §5.9, "what was sent stays sent"): after a
// reset, or a denial that comes after the call was sent, the ledger may
// hold it claimed, and then a person's approval was given once already.
// A succeeded operation is answered as replayed (stop, res): it is never
// asked for again nor denied. One whose outcome is not known — claimed,
// running, unknown, reconciling, needs_human — goes on to its claim
// (held, its state; "" for the others), which finds it there and has it
// reconciled; nobody is told nothing was sent. One the ledger never claimed, or that provably sent
// nothing or was refused (absent, failed), is asked for as before.
func (a *Activities) sentBefore(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, res contract.ExecuteToolResult) (_ contract.ExecuteToolResult, stop bool, held capstan.Outcome, err error) {
	op, err := a.Ledger.Get(ctx, in.OperationID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return res, false, "", nil
	case err != nil:
		return res, true, "", fmt.Errorf("read operation %s before asking for its approval: %w", in.OperationID, err)
	}
	switch op.State {
	case capstan.OutcomeSucceeded:
		res.Replayed = true
		if res, err = a.succeeded(ctx, in, res, op.ExternalID, op.Result); err == nil {
			res.Preview = resultPreview(impl, args, op.Result, res.Preview)
		}
		return res, true, "", err
	case capstan.OutcomeDeclared, capstan.OutcomeAbsent, capstan.OutcomeFailed:
		return res, false, "", nil
	default:
		return res, false, op.State, nil
	}
}

// ledgerOnly answers ExecuteToolInput.LedgerOnly: what the ledger holds
// of the operation, nothing decided, claimed or sent.
func (a *Activities) ledgerOnly(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, res contract.ExecuteToolResult) (contract.ExecuteToolResult, error) {
	res, stop, held, err := a.sentBefore(ctx, in, impl, args, res)
	switch {
	case err != nil || stop:
		return res, err
	case held != "":
		return res, unknownOperation(in.OperationID, held, nil)
	default:
		res.State = capstan.OutcomeAbsent
		return res, nil
	}
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
// for the person asked to approve it: the tool's own words when it gives
// them (tool.ApprovalTexter), else "pull request capstan/x → main in
// acme/payments" from its target. A tool that does neither is named by
// its own summary.
func approvalSummary(impl tool.Tool, args json.RawMessage) string {
	if at, ok := impl.(tool.ApprovalTexter); ok {
		if text := strings.TrimSpace(at.ApprovalText(args)); text != "" {
			return text
		}
	}
	tg, ok := impl.(tool.Targeted)
	if !ok {
		return impl.Summary(args)
	}
	t, err := tg.Target(args)
	if err != nil || t.Repository == "" {
		return impl.Summary(args)
	}
	switch {
	case t.Into != "":
		return fmt.Sprintf("pull request %s → %s in %s", t.Branch, t.Into, t.Repository)
	case t.CreatesBranch:
		return fmt.Sprintf("branch %s from %s in %s", t.Branch, t.From, t.Repository)
	case t.Path != "" && impl.Class() != tool.ReadOnly:
		return fmt.Sprintf("write %s on %s in %s", t.Path, t.Branch, t.Repository)
	default:
		return impl.Summary(args) + " (" + string(impl.Class()) + ")"
	}
}
