package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
)

// This file is the workflow's side of approvals (docs/design.md §5.9,
// changeApprovals). An operation whose call the task's policy decides
// require_approval goes declared → awaiting_approval → running … (once a
// person approves it) or → denied (a person denied it, or nobody answered
// within the task's approval timeout). Nothing is sent while it waits, nor
// ever after a denial; the same effect asked again later in the task gets
// the answer the first one got, without anyone being asked.

// Update names a person answers an approval with: `starter approve`,
// `starter deny`.
const (
	UpdateApprove = "approve"
	UpdateDeny    = "deny"
)

// The decisions of an ApprovalRecord.
const (
	DecisionApproved = "approved"
	DecisionDenied   = "denied"
)

// ApprovalRequest is the argument of the approve and deny updates.
type ApprovalRequest struct {
	// OperationID names the operation by MatchOperation's rule: its id,
	// or an ending of it at a ":" boundary.
	OperationID string `json:"operation_id"`
	// By names the person (--as, by default user@host).
	By string `json:"by"`
	// Note is approve's --note; Reason deny's --reason, which the model
	// reads.
	Note   string `json:"note,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Hash is the SHA-256 of the canonical call the person approves, as
	// they were shown it (OperationRecord.CallHash): an approve of an
	// operation bound to its call must carry it (changeApprovalsBound).
	Hash string `json:"hash,omitempty"`
	// Client is the sender's Temporal client identity, recorded beside By
	// for audit. The SDK gives an update's handler its id, name and
	// header, not the identity the request carried, so the sender states
	// it; it proves nothing.
	Client string `json:"client,omitempty"`
}

// ApprovalResult is the approve and deny updates' answer, given once the
// task has taken the decision.
type ApprovalResult struct {
	OperationID string `json:"operation_id"`
	Decision    string `json:"decision"`
	By          string `json:"by"`
	Summary     string `json:"summary"`
}

// approvalBook is the task's state of approvals. Its maps are made on
// first use.
type approvalBook struct {
	// waiting holds the operations that wait for an answer now; pending
	// the answers the updates gave that the waiting loop has not taken.
	waiting map[string]bool
	pending map[string]ApprovalRecord
	// answered holds every answer taken, by effect; a continued run gets
	// it from its checkpoint.
	answered map[string]ApprovalRecord
	// asked: the task set CapstanAwaitingApproval at least once.
	asked bool
	// calls holds, by operation id, the canonical call each waiting
	// operation bound to its call asks a person about (changeApprovalsBound):
	// what the current details and the Slack notice show.
	calls map[string]*contract.AwaitingApproval
}

// startApprovals reads changeApprovals as the chain's first run starts,
// for a chain that decides its calls against a policy.
func (t *task) startApprovals(ctx workflow.Context) {
	if !t.policy {
		return
	}
	t.approvals = t.since(ctx, changeApprovals)
}

// setApprovalHandlers registers the approve and deny updates.
func (t *task) setApprovalHandlers(ctx workflow.Context) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove,
		func(ctx workflow.Context, req ApprovalRequest) (ApprovalResult, error) {
			return t.answerApproval(ctx, req, true)
		},
		workflow.UpdateHandlerOptions{Validator: func(req ApprovalRequest) error { return t.validateApproval(req, true) }})
	if err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateDeny,
		func(ctx workflow.Context, req ApprovalRequest) (ApprovalResult, error) {
			return t.answerApproval(ctx, req, false)
		},
		workflow.UpdateHandlerOptions{Validator: func(req ApprovalRequest) error { return t.validateApproval(req, false) }})
}

// validateApproval refuses, before anything is recorded in history, an
// answer the task cannot take. It reads state only.
func (t *task) validateApproval(req ApprovalRequest, approve bool) error {
	switch {
	case strings.TrimSpace(req.By) == "":
		return errors.New("an approval's answer needs the name of who gives it (--as NAME)")
	case approve && req.Reason != "":
		return errors.New("approve takes a --note, not a --reason")
	case !approve && strings.TrimSpace(req.Reason) == "":
		return errors.New("deny needs a --reason: the model reads it as the tool's result")
	case !approve && req.Note != "":
		return errors.New("deny takes a --reason, not a --note")
	}
	if err := t.approver(req.By); err != nil {
		return err
	}
	id, err := MatchOperation(OperationIDs(t.result), req.OperationID)
	if err != nil {
		return fmt.Errorf("task %s has %v", t.in.TaskID, err)
	}
	if err := t.approvable(id); err != nil {
		return err
	}
	return t.sameCall(id, req, approve)
}

// approver refuses an answer by a name the task's approvers
// (AgentTaskInput.Approvers, CAPSTAN_APPROVERS) do not list.
func (t *task) approver(by string) error {
	if len(t.in.Approvers) == 0 || slices.Contains(t.in.Approvers, strings.TrimSpace(by)) {
		return nil
	}
	return fmt.Errorf("%s is not one of task %s's approvers (%s); nothing was changed", strings.TrimSpace(by), t.in.TaskID, strings.Join(t.in.Approvers, ", "))
}

// sameCall refuses an approve of an operation bound to its call
// (changeApprovalsBound) that does not carry the call's hash: the person
// approves exactly the call they were shown. A deny sends nothing and
// needs none.
func (t *task) sameCall(id string, req ApprovalRequest, approve bool) error {
	want := ""
	for i := len(t.result.Operations) - 1; i >= 0; i-- {
		if op := t.result.Operations[i]; op.OperationID == id {
			want = op.CallHash
			break
		}
	}
	got := strings.ToLower(strings.TrimSpace(req.Hash))
	switch {
	case !approve || want == "" || got == want:
		return nil
	case got == "":
		return fmt.Errorf("approve needs the sha256 of the call it approves (--hash %s): `starter show %s %s` prints the call and its hash", want, t.in.TaskID, req.OperationID)
	default:
		return fmt.Errorf("operation %s's call has sha256 %s, not %s: nothing was approved; `starter show %s %s` prints the call", id, want, got, t.in.TaskID, req.OperationID)
	}
}

// approvable is the compare of the answer's compare-and-set: operation id
// waits for an approval and nobody has answered it yet. Else it says who
// answered, or that the operation waits for none.
func (t *task) approvable(id string) error {
	if a, ok := t.approval.pending[id]; ok {
		return alreadyAnswered(id, a)
	}
	if t.approval.waiting[id] {
		return nil
	}
	for i := len(t.result.Operations) - 1; i >= 0; i-- {
		if op := t.result.Operations[i]; op.OperationID == id && op.Approval != nil {
			return alreadyAnswered(id, *op.Approval)
		}
	}
	state, _ := t.operationState(id)
	return fmt.Errorf("operation %s is %s and waits for no approval", id, state)
}

func alreadyAnswered(id string, a ApprovalRecord) error {
	switch {
	case a.Decision == DecisionApproved:
		return fmt.Errorf("operation %s was already approved by %s; nothing was changed", id, a.By)
	case a.By == "":
		return fmt.Errorf("operation %s was already denied: %s; nothing was changed", id, a.Reason)
	default:
		return fmt.Errorf("operation %s was already denied by %s (%s); nothing was changed", id, a.By, a.Reason)
	}
}

// answerApproval records a validated answer for the waiting loop, only if
// nobody has answered since the validator ran (another update may have
// been accepted in the same workflow task), and returns once the loop has
// taken it: after an approve, the operation's ExecuteTool is scheduled.
func (t *task) answerApproval(ctx workflow.Context, req ApprovalRequest, approve bool) (ApprovalResult, error) {
	id, err := MatchOperation(OperationIDs(t.result), req.OperationID)
	if err != nil {
		return ApprovalResult{}, fmt.Errorf("task %s has %v", t.in.TaskID, err)
	}
	if err := t.approvable(id); err != nil {
		return ApprovalResult{}, err
	}
	if err := errors.Join(t.approver(req.By), t.sameCall(id, req, approve)); err != nil {
		return ApprovalResult{}, err
	}
	a := ApprovalRecord{Decision: DecisionApproved, By: req.By, Note: req.Note, Client: req.Client}
	if approve && t.approval.calls[id] != nil {
		a.Hash = t.approval.calls[id].Hash
	}
	if !approve {
		a = ApprovalRecord{Decision: DecisionDenied, By: req.By, Reason: req.Reason, Client: req.Client}
	}
	if t.approval.pending == nil {
		t.approval.pending = map[string]ApprovalRecord{}
	}
	t.approval.pending[id] = a
	if err := workflow.Await(ctx, func() bool { _, left := t.approval.pending[id]; return !left }); err != nil {
		return ApprovalResult{}, err
	}
	res := ApprovalResult{OperationID: id, Decision: a.Decision, By: a.By}
	for _, op := range t.result.Operations {
		if op.OperationID == id {
			res.Summary = op.Summary
		}
	}
	return res, nil
}

func (t *task) approvalTimeout() time.Duration {
	if t.in.ApprovalTimeout > 0 {
		return t.in.ApprovalTimeout
	}
	return config.DefaultApprovalTimeout
}

// awaitApproval settles the approval an operation's ExecuteTool asked for
// (res.Awaiting): the answer its effect got earlier in the task, or a
// person's, or the timeout's. The answer is recorded on the operation,
// whose next ExecuteTool carries it (startOperation). It fails only when
// the task is cancelled while it waits.
func (t *task) awaitApproval(ctx workflow.Context, op declared, res contract.ExecuteToolResult) error {
	rec := &t.result.Operations[op.index]
	aw := res.Awaiting
	rec.Summary = aw.Summary
	if d := res.Decision; d != nil {
		t.note(ctx, "policy: %s %s by %s: %s", op.call.Name, d.Effect, d.Rule, d.Reason)
	}
	if t.bound(ctx) && aw.Hash != "" {
		rec.CallHash, rec.Arguments = aw.Hash, aw.Arguments
		if t.approval.calls == nil {
			t.approval.calls = map[string]*contract.AwaitingApproval{}
		}
		t.approval.calls[op.opID] = aw
	}
	// An approval binds to the call it was given for: the same effect
	// with other arguments (another title, say) is asked about again.
	if prior, ok := t.approval.answered[aw.Effect]; ok && (prior.Decision != DecisionApproved || prior.Hash == rec.CallHash) {
		prior.Again = true
		rec.Approval = &prior
		t.note(ctx, "operation %s asks again for %s, which was %s earlier in this task: the same answer, nobody asked", op.opID, aw.Summary, prior.Decision)
		return nil
	}
	a, err := t.askApproval(ctx, op, rec)
	if err != nil {
		return err
	}
	rec.Approval = &a
	if t.approval.answered == nil {
		t.approval.answered = map[string]ApprovalRecord{}
	}
	t.approval.answered[aw.Effect] = a
	return nil
}

// bound reads changeApprovalsBound: an operation that waits for approval
// is bound to its canonical call (its hash, shown with the call; an
// approve carries it and what is sent is checked against it), and the
// ledger is asked about the operation before a person is and when the task
// is cancelled while it waits. Read where an operation first waits, so
// only a task that asks records the marker.
func (t *task) bound(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeApprovalsBound, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// sentBefore asks the ledger about an operation ExecuteTool answered
// awaiting approval before a person is asked (changeApprovalsBound): after
// a reset to the moment it was asked, the person may have approved it
// and it was sent. It returns the operation's ExecuteTool answer (LedgerOnly)
// and true when the ledger holds it succeeded (replayed) or with an
// outcome nobody knows yet (an unknown error, which settle reconciles);
// false when nothing was sent: then the person is asked.
func (t *task) sentBefore(ctx workflow.Context, op declared) (contract.ExecuteToolResult, error, bool) {
	var res contract.ExecuteToolResult
	err := t.ledgerOnly(ctx, op).Get(ctx, &res)
	switch {
	case err != nil && ctx.Err() != nil:
		return res, err, false
	case err != nil:
		return res, err, true
	}
	return res, nil, res.State == capstan.OutcomeSucceeded
}

// ledgerOnly runs the operation's ExecuteTool with LedgerOnly: what the
// ledger holds of it; nothing decided, claimed or sent.
func (t *task) ledgerOnly(ctx workflow.Context, op declared) workflow.Future {
	actx := workflow.WithActivityOptions(ctx, toolOptions(capstan.ClassReadOnly, op.call.Summary, t.in.ModelLimits, t.waitsOnBreakers(ctx)))
	in := contract.ExecuteToolInput{
		Tenant: t.in.Tenant, TaskID: t.in.TaskID, Scope: t.scope, TurnID: op.tid, OperationID: op.opID,
		ToolCallID: op.call.ID, Tool: op.call.Name, Arguments: op.call.Arguments, LedgerOnly: true,
	}
	return workflow.ExecuteActivity(actx, contract.ActivityExecuteTool, in)
}

// stoppedAsking records what an operation is whose task stopped while it
// waited for approval: since changeApprovalsBound as the ledger holds it,
// asked in a disconnected context — succeeded (replayed), unknown (the
// cancelled task reconciles it), or nothing sent — never "not sent" about
// an operation that was.
func (t *task) stoppedAsking(ctx workflow.Context, op declared, rec *OperationRecord) {
	const notSent = "not sent: the task stopped while the operation waited for approval"
	if !t.bound(ctx) {
		rec.State, rec.Reason = capstan.OutcomeAbsent, notSent
		return
	}
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	var res contract.ExecuteToolResult
	err := t.ledgerOnly(dctx, op).Get(dctx, &res)
	switch {
	case err != nil:
		t.markUnknown(ctx, rec, fmt.Sprintf("the task stopped while operation %s waited for approval, and the ledger holds it with an outcome nobody knows yet: %s", op.opID, contract.Describe(err)))
	case res.State == capstan.OutcomeSucceeded:
		rec.State, rec.ExternalID, rec.Replayed = res.State, res.ExternalID, true
		rec.Reason = "sent before the task stopped: the ledger holds it succeeded"
		t.note(dctx, "operation %s succeeded before the task stopped (the ledger holds it; nothing sent again)", op.opID)
	default:
		rec.State, rec.Reason = capstan.OutcomeAbsent, notSent
	}
}

// askApproval records the operation as awaiting approval, says so in the
// task's search attributes, current details and (when it has a channel)
// Slack, and waits for the approve or deny update or the approval timeout.
func (t *task) askApproval(ctx workflow.Context, op declared, rec *OperationRecord) (ApprovalRecord, error) {
	rec.State = capstan.OutcomeAwaitingApproval
	if t.approval.waiting == nil {
		t.approval.waiting = map[string]bool{}
	}
	t.approval.waiting[op.opID] = true
	t.approval.asked = true
	defer delete(t.approval.waiting, op.opID)
	ref := t.shortRef(op.opID)
	approve := fmt.Sprintf("starter approve %s %s", t.in.TaskID, ref)
	call := t.approval.calls[op.opID]
	if call != nil {
		approve += " --hash " + call.Hash
	}
	t.result.Waiting = "waiting for approval of: " + rec.Summary + " — " + approve
	if err := workflow.UpsertTypedSearchAttributes(ctx, t.flagUpdate(ctx, FlagAwaitingApproval, true)); err != nil {
		return ApprovalRecord{}, err
	}
	details := fmt.Sprintf("**Waiting for approval of:** %s\n\n`%s` sends it; `starter deny %s %s --reason TEXT` refuses it. "+
		"Unanswered within %s, it is denied.", rec.Summary, approve, t.in.TaskID, ref, t.approvalTimeout())
	if call != nil {
		details += fmt.Sprintf("\n\n**The call** (sha256 `%s`; `starter show %s %s` prints it whole):\n\n%s",
			call.Hash, t.in.TaskID, ref, fenced(contract.FormatCall(op.call.Name, call.Hash, call.Call)))
	}
	workflow.SetCurrentDetails(ctx, details)
	t.note(ctx, "operation %s waits for approval of: %s (%s)", op.opID, rec.Summary, approve)
	if err := t.noticeApproval(ctx, op, rec.Summary, approve, call); err != nil {
		return ApprovalRecord{}, err
	}
	answered, err := workflow.AwaitWithTimeout(ctx, t.approvalTimeout(), func() bool { _, ok := t.approval.pending[op.opID]; return ok })
	if err != nil {
		t.result.Waiting = "" // cancelled: the task no longer waits
		return ApprovalRecord{}, err
	}
	a := ApprovalRecord{Decision: DecisionDenied, Reason: fmt.Sprintf("no approval within %s", t.approvalTimeout())}
	if answered {
		a = t.approval.pending[op.opID]
		delete(t.approval.pending, op.opID)
	}
	delete(t.approval.calls, op.opID)
	t.result.Waiting = ""
	if len(t.approval.waiting) <= 1 {
		workflow.SetCurrentDetails(ctx, "")
		if err := workflow.UpsertTypedSearchAttributes(ctx, t.flagUpdate(ctx, FlagAwaitingApproval, false)); err != nil {
			return a, err
		}
	}
	switch {
	case a.Decision == DecisionApproved:
		t.note(ctx, "operation %s approved by %s%s", op.opID, a.By, noteSuffix(a.Note))
	case a.By == "":
		t.note(ctx, "operation %s denied: %s", op.opID, a.Reason)
	default:
		t.note(ctx, "operation %s denied by %s: %s", op.opID, a.By, a.Reason)
	}
	return a, nil
}

func noteSuffix(note string) string {
	if note == "" {
		return ""
	}
	return " (" + note + ")"
}

// shortRef is the operation's id without "<tenant>:<task id>:" and, when
// that still names it alone (MatchOperation), without the chain scope: what
// a person types after `starter approve TASK`.
func (t *task) shortRef(opID string) string {
	short := opID
	if i := strings.Index(opID, ":"+t.in.TaskID+":"); i >= 0 {
		short = opID[i+len(t.in.TaskID)+2:]
	}
	if s := WithoutScope(short); s != short {
		if got, err := MatchOperation(OperationIDs(t.result), s); err == nil && got == opID {
			short = s
		}
	}
	return short
}

// approvalInput is what the operation's next ExecuteTool carries of its
// approval: whether the task can ask at all, and the answer it got.
func (t *task) approvalInput(in *contract.ExecuteToolInput, rec OperationRecord) {
	in.Approvals = t.approvals
	switch a := rec.Approval; {
	case a == nil || !t.approvals:
	case a.Decision == DecisionApproved:
		in.Approval = &contract.Approval{By: a.By, Note: a.Note, Hash: a.Hash}
	default:
		in.Denial = &contract.Denial{By: a.By, Reason: a.Reason}
	}
}

// denied records on an operation that ExecuteTool reported denied why, and
// by whom: nothing was sent.
func (t *task) denied(ctx workflow.Context, rec *OperationRecord) {
	a := rec.Approval
	if a == nil {
		return
	}
	rec.Reason = "denied: " + a.Reason
	if a.By != "" {
		rec.Reason = "denied by " + a.By + ": " + a.Reason
	}
	t.note(ctx, "operation %s %s; nothing was sent", rec.OperationID, rec.Reason)
}

// fenced is text in a Markdown code block that nothing in it can close: a
// fence one backtick longer than the longest run of backticks in text.
func fenced(text string) string {
	longest, run := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + "\n" + text + "\n" + fence
}
