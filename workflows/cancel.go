package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/ledger"
)

// cancelledState is what an operation cancelled with its task is known to
// be (docs/design.md §5.6): UNKNOWN only if its request may have been sent —
// the activity said so, or its worker was lost mid-call; an activity that
// stopped before sending (it waits for its cancellation to be handled, so
// it reports which) sent nothing: ABSENT.
func cancelledState(err error) (ledger.State, string) {
	var appErr *temporal.ApplicationError
	var timeoutErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeOperationUnknown:
		return ledger.StateUnknown, appErr.Error()
	case errors.As(err, &timeoutErr):
		return ledger.StateUnknown, "the worker was lost while the task was cancelled"
	case temporal.IsCanceledError(err):
		return ledger.StateAbsent, "cancelled before anything was sent"
	default:
		return ledger.StateUnknown, err.Error()
	}
}

// settleCancelled reconciles, in ctx (a disconnected context), what a
// cancelled task left unknown, so the task never ends with an effect that
// nobody looked for (docs/design.md §5.6). Nothing is executed again and
// nobody is asked: an effect the reconciler cannot settle stays listed as
// NEEDS_HUMAN in the task's result.
func (t *task) settleCancelled(ctx workflow.Context) {
	for _, op := range t.declared {
		rec := &t.result.Operations[op.index]
		if rec.State != ledger.StateUnknown {
			continue
		}
		t.settleOnce(ctx, t.toolEffect(op.tid, op), func(r activities.ReconcileResult) {
			switch r.Verdict {
			case activities.VerdictAbsent:
				rec.State, rec.Reason = ledger.StateAbsent, r.Reason
			default:
				rec.State, rec.Reason = ledger.StateNeedsHuman, r.Reason
			}
		})
	}
	for i := range t.result.Deliveries {
		rec := &t.result.Deliveries[i]
		if rec.State != DeliveryUnknown {
			continue
		}
		t.settleOnce(ctx, t.deliveryEffect(rec, t.targets()[i], t.result.FinalText), func(r activities.ReconcileResult) {
			if r.Verdict == activities.VerdictAbsent {
				rec.State = DeliveryDeadLetter
			} else {
				rec.State = DeliveryNeedsHuman
			}
		})
	}
	t.markSettled(ctx)
}

// settleOnce reconciles one effect once: found is recorded by the effect,
// any other verdict by other.
func (t *task) settleOnce(ctx workflow.Context, e effect, other func(activities.ReconcileResult)) {
	r, err := t.reconcile(ctx, e, workflow.Now(ctx), nil)
	if err != nil {
		r = activities.ReconcileResult{Verdict: activities.VerdictIndeterminate, Reason: err.Error()}
	}
	if r.Verdict == activities.VerdictFound {
		e.found(r)
	} else {
		other(r)
	}
	t.note(ctx, "operation %s, in flight when the task was cancelled, is %s: %s", e.opID, r.Verdict, r.Reason)
}
