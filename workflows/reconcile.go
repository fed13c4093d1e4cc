package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/ledger"
)

// maxReexecutions bounds how often an operation confirmed absent is
// executed again with the same id before a person is asked.
const maxReexecutions = 2

// recover settles a tool operation whose outcome is unknown (docs/design.md §5.4
// step 5). The reconciler asks the external system: found → SUCCEEDED, and
// the model is told the operation was recovered; absent → executed again
// with the same operation id, at most maxReexecutions times; indeterminate
// → a person decides through the resolve update. Nothing is ever sent
// again unless the reconciler or a person confirmed it absent.
func (t *task) recover(ctx workflow.Context, tid string, op declared, why string) (string, error) {
	rec := &t.result.Operations[op.index]
	t.note(ctx, "operation %s is unknown; reconciling: %s", op.opID, why)
	since := workflow.Now(ctx)
	executions := 0
	var resolution *activities.Resolution
	for {
		r, err := t.reconcile(ctx, op, since, resolution)
		if err != nil {
			return "", err
		}
		resolution = nil
		switch r.Verdict {
		case activities.VerdictFound:
			rec.State, rec.ExternalID, rec.Recovered, rec.Reason = ledger.StateSucceeded, r.ExternalID, true, r.Reason
			t.markSettled(ctx)
			t.note(ctx, "operation %s recovered: %s", op.opID, r.Reason)
			return r.Item, nil
		case activities.VerdictAbsent:
			if executions < maxReexecutions {
				executions++
				rec.State, rec.Reason = ledger.StateAbsent, r.Reason
				t.markSettled(ctx)
				t.note(ctx, "operation %s is absent (%s); executing it again with the same id (%d/%d)", op.opID, r.Reason, executions, maxReexecutions)
				item, unknown, err := t.settle(ctx, op, t.startOperation(ctx, tid, op))
				if err != nil || unknown == "" {
					return item, err
				}
				t.note(ctx, "operation %s is unknown again; reconciling: %s", op.opID, unknown)
				since = workflow.Now(ctx)
				continue
			}
			r.Reason = fmt.Sprintf("it was executed %d more times and is still not confirmed: %s", executions, r.Reason)
		}
		// Indeterminate, or absent too often: a person decides.
		rec.State, rec.Reason = ledger.StateNeedsHuman, r.Reason
		req, err := t.askPerson(ctx, op.opID, r.Reason)
		if errors.Is(err, errAborted) {
			return "", fail(FailOperationAborted, "a person aborted the task at operation %s (%s): %s", op.opID, op.call.Name, r.Reason)
		}
		if err != nil {
			return "", err
		}
		resolution = &activities.Resolution{Verdict: activities.VerdictAbsent}
		if req.Decision == DecisionFound {
			resolution = &activities.Resolution{Verdict: activities.VerdictFound, ExternalID: req.URL}
		} else {
			executions = min(executions, maxReexecutions-1) // a person's absent earns one more execution
		}
	}
}

// reconcile runs the Reconcile activity once. A reconciler that fails
// outright (its retries spent) cannot tell: that is indeterminate, for a
// person to decide, never absent.
func (t *task) reconcile(ctx workflow.Context, op declared, since time.Time, resolution *activities.Resolution) (activities.ReconcileResult, error) {
	summary := "reconcile " + op.call.Summary
	if resolution != nil {
		summary = "record a person's verdict on " + op.call.Summary
	}
	actx := workflow.WithActivityOptions(ctx, reconcileOptions(t.in.ReconcileWindow, t.in.ModelLimits.WithDefaults().HeartbeatTimeout, summary))
	var r activities.ReconcileResult
	err := workflow.ExecuteActivity(actx, a.Reconcile, activities.ReconcileInput{
		Tenant: t.in.Tenant, TaskID: t.in.TaskID, OperationID: op.opID, ToolCallID: op.call.ID,
		Arguments: op.call.Arguments, Since: since, Window: t.in.ReconcileWindow, Resolution: resolution,
	}).Get(ctx, &r)
	if err == nil {
		return r, nil
	}
	if ctx.Err() != nil {
		return r, err
	}
	return activities.ReconcileResult{OperationID: op.opID, Verdict: activities.VerdictIndeterminate,
		Reason: fmt.Sprintf("the reconciler could not finish: %v", err)}, nil
}

// markSettled updates the count of unknown operations.
func (t *task) markSettled(ctx workflow.Context) {
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrUnknownOps.ValueSet(int64(t.unknownOps())))
}
