package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
)

// cancelledState is what an operation cancelled with its task is known to
// be (docs/design.md §5.6): unknown only if its request may have been sent —
// the activity said so, or its worker was lost mid-call; an activity that
// stopped before sending (it waits for its cancellation to be handled, so
// it reports which) sent nothing: absent.
func cancelledState(err error) (capstan.Outcome, string) {
	var timeoutErr *temporal.TimeoutError
	switch {
	case contract.IsOperationUnknown(err):
		return capstan.OutcomeUnknown, contract.Describe(err)
	case errors.As(err, &timeoutErr):
		return capstan.OutcomeUnknown, "the worker was lost while the task was cancelled"
	case temporal.IsCanceledError(err):
		return capstan.OutcomeAbsent, "cancelled before anything was sent"
	default:
		return capstan.OutcomeUnknown, err.Error()
	}
}

// settleCancelled reconciles, in ctx (a disconnected context), what a
// cancelled task left unknown, so the task never ends with an effect that
// nobody looked for (docs/design.md §5.6). Nothing is executed again and
// nobody is asked: an effect the reconciler cannot settle stays listed as
// needs_human in the task's result. Since changeCancelSettlesEveryUnknown
// that is every effect whose outcome is not known, whatever state it was
// in; before it, those recorded unknown.
func (t *task) settleCancelled(ctx workflow.Context) {
	notKnown := func(read bool, o capstan.Outcome) bool { return !read && !o.Known() }
	recordedUnknown := func(_ bool, o capstan.Outcome) bool { return o == capstan.OutcomeUnknown }
	open, left := notKnown, t.cancelledEffects(notKnown)
	if left == 0 && t.unknownOps()+t.unknownDeliveries() == 0 {
		return // nothing to look for, whichever rule holds
	}
	if !t.since(ctx, changeCancelSettlesEveryUnknown) {
		open, left = recordedUnknown, t.unknownOps()+t.unknownDeliveries()
	}
	if left == 0 || !t.reconciles(ctx) {
		return
	}
	for _, op := range t.declared {
		rec := &t.result.Operations[op.index]
		if !open(op.readOnly(), rec.State) {
			continue
		}
		e := t.toolEffect(op.tid, op)
		e.resends = false // a cancelled task sends nothing more
		t.settleOnce(ctx, e, func(r contract.ReconcileResult) {
			switch r.Verdict {
			case capstan.VerdictAbsent:
				rec.State, rec.Reason = capstan.OutcomeAbsent, r.Reason
			default:
				rec.State, rec.Reason = capstan.OutcomeNeedsHuman, r.Reason
			}
		})
	}
	for i := range t.result.Deliveries {
		rec := &t.result.Deliveries[i]
		if !open(false, rec.State) {
			continue
		}
		t.settleOnce(ctx, t.deliveryEffect(rec, t.targets()[i], t.result.FinalText), func(r contract.ReconcileResult) {
			if r.Verdict == capstan.VerdictAbsent {
				rec.State = capstan.OutcomeAbsent
			} else {
				rec.State = capstan.OutcomeNeedsHuman
			}
		})
	}
	t.markSettled(ctx)
}

// cancelledEffects counts the operations declared in this run and the
// deliveries for which open holds, given whether the operation is
// read-only and its outcome.
func (t *task) cancelledEffects(open func(read bool, o capstan.Outcome) bool) int {
	n := 0
	for _, op := range t.declared {
		if open(op.readOnly(), t.result.Operations[op.index].State) {
			n++
		}
	}
	for _, d := range t.result.Deliveries {
		if open(false, d.State) {
			n++
		}
	}
	return n
}

// settleOnce reconciles one effect once: found is recorded by the effect,
// any other verdict by notFound.
func (t *task) settleOnce(ctx workflow.Context, e effect, notFound func(contract.ReconcileResult)) {
	r, err := t.reconcile(ctx, e, workflow.Now(ctx), nil)
	if err != nil {
		r = contract.ReconcileResult{Verdict: capstan.VerdictIndeterminate, Reason: err.Error()}
	}
	if r.Verdict == capstan.VerdictFound {
		e.found(r)
	} else {
		notFound(r)
	}
	t.note(ctx, "operation %s, in flight when the task was cancelled, is %s: %s", e.opID, r.Verdict, r.Reason)
}
