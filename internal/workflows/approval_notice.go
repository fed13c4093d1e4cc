package workflows

import (
	"fmt"
	"strconv"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
)

// noticeApproval posts, when the task has a Slack channel, one message
// there saying what waits for approval and the command that approves it
// (docs/design.md §5.9): a delivery like the final answer's — the Deliver
// activity, claimed in the ledger under an operation id of its own, made
// of the operation's id and its place among the task's operations, so a
// retry, a lost worker or a replay never posts it twice. It is recorded in
// TaskResult.Notices. A notice that could not be posted does not stop the
// task: the operation still waits, and status and list show it; only a
// cancellation is returned.
//
// An operation bound to its call (changeApprovalsBound, call not nil) has
// the call in the notice, each field capped, and its hash. The text is
// plain: the Slack layer escapes it for mrkdwn.
func (t *task) noticeApproval(ctx workflow.Context, op declared, summary, approve string, call *contract.AwaitingApproval) error {
	if t.in.SlackChannel == "" {
		return nil
	}
	d := target{slack: t.in.SlackChannel}
	t.result.Notices = append(t.result.Notices, DeliveryRecord{
		OperationID: op.opID + ":approval-notice:" + strconv.Itoa(op.index+1), Target: d.name(), State: capstan.OutcomeDeclared})
	rec := &t.result.Notices[len(t.result.Notices)-1]
	text := fmt.Sprintf("Capstan task %s waits for your approval of: %s\nApprove it: %s\nDeny it: starter deny %s %s --reason TEXT",
		t.in.TaskID, summary, approve, t.in.TaskID, t.shortRef(op.opID))
	if call != nil {
		text = fmt.Sprintf("Capstan task %s waits for your approval of: %s\n\nThe call (sha256 %s):\n%s\n\nApprove it: %s\nDeny it: starter deny %s %s --reason TEXT\nThe whole call: starter show %s %s",
			t.in.TaskID, summary, call.Hash, contract.FormatCall(op.call.Name, call.Hash, call.Call), approve, t.in.TaskID, t.shortRef(op.opID), t.in.TaskID, t.shortRef(op.opID))
	}
	unknown, err := t.post(ctx, rec, d, text)
	switch {
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		t.note(ctx, "the approval notice to %s could not be posted (%v); operation %s still waits for approval", d.label(), err, op.opID)
	case unknown != "":
		rec.State = capstan.OutcomeUnknown
		t.note(ctx, "the approval notice to %s may have been posted (%s); operation %s still waits for approval", d.label(), unknown, op.opID)
	}
	return nil
}
