package workflows

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
)

// declared is a tool call with the operation id the workflow gave it.
type declared struct {
	call  contract.ToolCallRef
	opID  string
	tid   string // the turn that declared it
	index int    // into result.Operations
}

// runOperations executes the tool calls of one turn and returns the refs of
// their tool messages, in the model's order. Runs of consecutive read-only
// calls execute in parallel; every mutation runs alone, in model order.
func (t *task) runOperations(ctx workflow.Context, turn int, calls []contract.ToolCallRef) ([]string, error) {
	tid := turnID(t.in.TaskID, t.scope, turn)
	ops := make([]declared, len(calls))
	for i, c := range calls {
		d, err := t.declare(ctx, tid, turn, i+1, c)
		if err != nil {
			return nil, err
		}
		ops[i] = d
	}
	items := make([]string, len(ops))
	for i := 0; i < len(ops); {
		j := i + 1
		if ops[i].readOnly() {
			for j < len(ops) && ops[j].readOnly() {
				j++
			}
		}
		futures := make([]workflow.Future, 0, j-i)
		for _, op := range ops[i:j] {
			futures = append(futures, t.startOperation(ctx, tid, op))
		}
		for k, f := range futures {
			item, err := t.awaitOperation(ctx, tid, ops[i+k], f)
			if err != nil {
				return nil, err
			}
			items[i+k] = item
		}
		i = j
	}
	return items, nil
}

func (d declared) readOnly() bool { return capstan.Class(d.call.Class) == capstan.ClassReadOnly }

// declare gives the position-th tool call of a turn its operation id
// (docs/design.md §5.2) and records it. The business key comes from the model turn
// that committed the call; a call without one is named by its position in
// that turn, so the same committed turn always yields the same ids — after
// a retry, a continue-as-new or a reset alike. Tasks started before
// changeOperationIDByPosition keep the uuid they drew.
func (t *task) declare(ctx workflow.Context, tid string, turn, position int, c contract.ToolCallRef) (declared, error) {
	d := declared{call: c}
	key := c.BusinessKey
	var n string
	if key == "" {
		if !t.inEffect(ctx, changeOperationIDByPosition) {
			if err := workflow.SideEffect(ctx, func(workflow.Context) any { return uuid.NewString() }).Get(&n); err != nil {
				return d, err
			}
		} else {
			n = strconv.Itoa(position)
		}
	}
	d.opID = operationID(t.in.Tenant, t.in.TaskID, t.scope, c.Name, key, fmt.Sprintf("t%d", turn), n)
	t.result.Operations = append(t.result.Operations, OperationRecord{
		OperationID: d.opID, TurnID: tid, ToolCallID: c.ID, Tool: c.Name, State: capstan.OutcomeDeclared, Summary: c.Summary,
	})
	d.index = len(t.result.Operations) - 1
	d.tid = tid
	t.declared = append(t.declared, d)
	return d, nil
}

func (t *task) startOperation(ctx workflow.Context, tid string, op declared) workflow.Future {
	t.result.Operations[op.index].State = capstan.OutcomeRunning
	actx := workflow.WithActivityOptions(ctx, toolOptions(capstan.Class(op.call.Class), op.call.Summary, t.in.ModelLimits, t.waitsOnBreakers(ctx)))
	in := contract.ExecuteToolInput{
		Tenant: t.in.Tenant, TaskID: t.in.TaskID, Scope: t.scope, TurnID: tid, OperationID: op.opID,
		ToolCallID: op.call.ID, Tool: op.call.Name, Arguments: op.call.Arguments, Policy: t.toolPolicy(),
	}
	t.approvalInput(&in, t.result.Operations[op.index])
	return workflow.ExecuteActivity(actx, contract.ActivityExecuteTool, in)
}

// awaitOperation waits for an operation started by startOperation and
// settles it: an outcome that is unknown is reconciled (docs/design.md §5.4)
// rather than ending the task, in tasks started since changeReconcileUnknown.
func (t *task) awaitOperation(ctx workflow.Context, tid string, op declared, f workflow.Future) (string, error) {
	item, unknown, err := t.settle(ctx, op, f)
	if err != nil || unknown == "" {
		return item, err
	}
	if !t.reconciles(ctx) {
		return "", fail(FailOperationUnknown, "%s", unknown)
	}
	return t.recover(ctx, t.toolEffect(tid, op), unknown)
}

// settle reads how one ExecuteTool ended. An outcome nobody knows yet is
// returned as unknown (why it is unknown), with the operation recorded
// unknown; every other failure ends the task. An operation an open breaker
// kept from being sent (its claim released) is waited for and started
// again, as often as the breaker asks; one that waits for a person's
// approval (approval.go) is started again with the answer.
func (t *task) settle(ctx workflow.Context, op declared, f workflow.Future) (item, unknown string, err error) {
	rec := &t.result.Operations[op.index]
	var res contract.ExecuteToolResult
	err = f.Get(ctx, &res)
	for ctx.Err() == nil {
		if err == nil && res.Awaiting != nil && t.approvals {
			if t.bound(ctx) {
				checked, cerr, sent := t.sentBefore(ctx, op)
				if ctx.Err() != nil {
					t.stoppedAsking(ctx, op, rec)
					return "", "", errors.Join(workflow.ErrCanceled, cerr)
				}
				if sent {
					res, err = checked, cerr
					continue
				}
			}
			if err := t.awaitApproval(ctx, op, res); err != nil {
				t.stoppedAsking(ctx, op, rec)
				return "", "", err
			}
			res = contract.ExecuteToolResult{}
			err = t.startOperation(ctx, op.tid, op).Get(ctx, &res)
			continue
		}
		w, open := contract.BreakerWaitOf(err)
		if !open || !t.waitsOnBreakers(ctx) {
			break
		}
		rec.State = capstan.OutcomeAbsent
		if err := t.waitForBreaker(ctx, w.Breaker, w.Wait, w.OutageLimit, fmt.Sprintf("operation %s (%s)", op.opID, op.call.Name)); err != nil {
			rec.State, rec.Reason = capstan.OutcomeAbsent, "not sent: "+stoppedWaiting(ctx, w.Breaker)
			return "", "", err
		}
		err = t.startOperation(ctx, op.tid, op).Get(ctx, &res)
	}
	if err == nil {
		t.ledgerBack()
		rec.State, rec.ExternalID, rec.Replayed = res.State, res.ExternalID, res.Replayed
		switch {
		case res.Replayed:
			t.note(ctx, "operation %s %s (replayed from the ledger; nothing sent)", op.opID, res.State)
		case res.State == capstan.OutcomeDenied:
			t.denied(ctx, rec)
		default:
			t.note(ctx, "operation %s %s", op.opID, res.State)
		}
		return res.Item, "", t.policyDecided(ctx, op, rec, res.Decision)
	}
	if ctx.Err() != nil {
		rec.State, rec.Reason = cancelledState(err)
		return "", "", err
	}
	switch {
	case contract.IsOperationConflict(err):
		rec.State = capstan.OutcomeFailed
		return "", "", fail(FailOperationConflict, "%s", contract.Describe(err))
	case contract.IsOperationUnknown(err):
		t.markUnknown(ctx, rec, contract.Describe(err))
		return "", contract.Describe(err), nil
	case contract.IsWorkerConfig(err):
		rec.State = capstan.OutcomeAbsent
		return "", "", fail(FailWorkerMisconfigured, "%s", contract.Describe(err))
	}
	if op.readOnly() {
		rec.State = capstan.OutcomeFailed
		return "", "", fail(FailOperationFailed, "%s did not complete: %v", op.call.Name, err)
	}
	// A mutation whose attempts ran out (a lost worker, a claim still held
	// elsewhere) may have acted: it is unknown, never failed.
	why := fmt.Sprintf("%s %s could not be confirmed and may have taken effect: %v", op.call.Name, op.opID, err)
	t.markUnknown(ctx, rec, why)
	return "", why, nil
}

// markUnknown records an operation as unknown and counts it in the task's
// search attributes. The upsert can fail only on a malformed attribute,
// which replay tests would show; the count is advisory.
func (t *task) markUnknown(ctx workflow.Context, rec *OperationRecord, why string) {
	rec.State = capstan.OutcomeUnknown
	rec.Reason = why
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrUnknownOps.ValueSet(int64(t.unknownOps())))
}

// unknownDeliveries and unknownOps count the deliveries and the operations
// (of every run of the task) recorded unknown.
func (t *task) unknownDeliveries() int {
	n := 0
	for _, d := range t.result.Deliveries {
		if d.State == capstan.OutcomeUnknown {
			n++
		}
	}
	return n
}

func (t *task) unknownOps() int {
	n := 0
	for _, op := range t.result.Operations {
		if op.State == capstan.OutcomeUnknown {
			n++
		}
	}
	return n
}
