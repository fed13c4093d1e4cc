package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
)

// reconciles reports whether this task settles unknown outcomes by asking
// (changeReconcileUnknown) rather than failing on them.
func (t *task) reconciles(ctx workflow.Context) bool {
	return t.inEffect(ctx, changeReconcileUnknown)
}

// maxReexecutions bounds how often a tool operation confirmed absent is
// executed again with the same id before a person is asked.
const maxReexecutions = 2

// effect is an operation whose outcome is unknown, as recover sees it: a
// tool call or a delivery. Its hooks keep the task's record of it.
type effect struct {
	opID    string
	summary string                  // what the UI shows for its reconciliation
	input   contract.ReconcileInput // identity fields; recover sets Since and Resolution
	// reexecutions bounds the executions after a confirmed absent.
	reexecutions int
	// execute sends it again with the same operation id; unknown is set
	// when that outcome is unknown too.
	execute func(ctx workflow.Context) (item, unknown string, err error)
	// reconciling, when set, records that a reconciler is asking; found,
	// absent and needsPerson record the verdicts.
	reconciling func()
	found       func(r contract.ReconcileResult)
	absent      func(r contract.ReconcileResult, n int)
	needsPerson func(reason string)
	// exhausted, when set, ends the task once re-executions are spent;
	// otherwise a person decides.
	exhausted func(ctx workflow.Context, r contract.ReconcileResult) error
	// dependency, when set, names what a write confirmed absent depends
	// on: since changeAbsentWritesRetried such a write (conditional or
	// idempotent) is executed again with backoff after its re-executions
	// are spent (retryAbsent), never put to a person.
	dependency string
	// delivery: e is a delivery, whose retries past its sends are gated
	// by changeAbsentDeliveriesRetried, and which exhausted dead-letters
	// once the outage limit has passed.
	delivery bool
	// resends: the reconciler may settle the write by sending it again
	// (contract.ReconcileInput.Resend), since changeSettleBySending.
	resends bool
}

// recover settles an effect whose outcome is unknown (docs/design.md §5.4
// step 5). The reconciler asks the external system: found → settled, and
// for a tool the model is told it was recovered; absent → executed again
// with the same operation id, at most e.reexecutions times; indeterminate →
// a person decides through the resolve update. Nothing is ever sent again
// unless the reconciler or a person confirmed it absent.
func (t *task) recover(ctx workflow.Context, e effect, why string) (string, error) {
	t.note(ctx, "operation %s is unknown; reconciling: %s", e.opID, why)
	since := workflow.Now(ctx)
	first := since // when the operation was first unknown
	executions := 0
	var resolution *contract.Resolution
	for {
		if e.reconciling != nil {
			e.reconciling()
		}
		r, err := t.reconcile(ctx, e, since, resolution)
		if err != nil {
			return "", err
		}
		if resolution != nil && resolution.Verdict == capstan.VerdictFound {
			t.answerFound(ctx, e.opID, r)
		}
		resolution = nil
		switch r.Verdict {
		case capstan.VerdictFound:
			e.found(r)
			t.markSettled(ctx)
			t.note(ctx, "operation %s recovered: %s", e.opID, r.Reason)
			return r.Item, nil
		case capstan.VerdictAbsent:
			retried := executions >= e.reexecutions && t.retriesAbsent(ctx, e)
			if executions < e.reexecutions || retried {
				executions++
				e.absent(r, executions)
				t.markSettled(ctx)
				if retried {
					if err := t.backOffAbsent(ctx, e, r, executions-e.reexecutions, first); err != nil {
						return "", err
					}
				}
				if !retried {
					t.note(ctx, "operation %s is absent (%s); executing it again with the same id (%d/%d)", e.opID, r.Reason, executions, e.reexecutions)
				}
				item, unknown, err := e.execute(ctx)
				if err != nil || unknown == "" {
					return item, err
				}
				t.note(ctx, "operation %s is unknown again; reconciling: %s", e.opID, unknown)
				since = workflow.Now(ctx)
				continue
			}
			if e.exhausted != nil {
				return "", e.exhausted(ctx, r)
			}
			r.Reason = fmt.Sprintf("it was executed %d more times and is still not confirmed: %s", executions, r.Reason)
		}
		// Indeterminate, or absent too often: a person decides.
		e.needsPerson(r.Reason)
		req, err := t.askPerson(ctx, e.opID, r.Reason)
		if errors.Is(err, errAborted) {
			return "", fail(FailOperationAborted, "a person aborted the task at operation %s: %s", e.opID, r.Reason)
		}
		if err != nil {
			return "", err
		}
		resolution = &contract.Resolution{Verdict: capstan.VerdictAbsent, ResolvedBy: req.ResolvedBy}
		if req.Decision == DecisionFound {
			resolution = &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: req.URL, ResolvedBy: req.ResolvedBy}
		} else {
			executions = min(executions, e.reexecutions-1) // a person's absent earns one more execution
		}
	}
}

// toolEffect is a tool operation as recover sees it.
func (t *task) toolEffect(tid string, op declared) effect {
	rec := &t.result.Operations[op.index]
	return effect{
		opID:         op.opID,
		summary:      op.call.Summary,
		input:        contract.ReconcileInput{OperationID: op.opID, ToolCallID: op.call.ID, Arguments: op.call.Arguments},
		reexecutions: maxReexecutions,
		execute: func(ctx workflow.Context) (string, string, error) {
			return t.settle(ctx, op, t.startOperation(ctx, tid, op))
		},
		found: func(r contract.ReconcileResult) {
			rec.State, rec.ExternalID, rec.Recovered, rec.Reason = capstan.OutcomeSucceeded, r.ExternalID, true, r.Reason
		},
		absent:      func(r contract.ReconcileResult, _ int) { rec.State, rec.Reason = capstan.OutcomeAbsent, r.Reason },
		needsPerson: func(reason string) { rec.State, rec.Reason = capstan.OutcomeNeedsHuman, reason },
		dependency:  absentRetried(op.call),
		resends:     true,
	}
}

// reconcile runs the Reconcile activity once. A reconciler that fails
// outright (its retries spent) cannot tell: that is indeterminate, for a
// person to decide, never absent.
func (t *task) reconcile(ctx workflow.Context, e effect, since time.Time, resolution *contract.Resolution) (contract.ReconcileResult, error) {
	summary := "reconcile " + e.summary
	if resolution != nil {
		summary = "record a person's verdict on " + e.summary
	}
	waits := t.reconcileWaits(ctx)
	opts := reconcileOptions(t.in.ReconcileWindow, t.in.ModelLimits.WithDefaults().HeartbeatTimeout, summary)
	if waits {
		opts.RetryPolicy.NonRetryableErrorTypes = append(opts.RetryPolicy.NonRetryableErrorTypes, contract.ErrTypeBreakerOpen)
	}
	actx := workflow.WithActivityOptions(ctx, opts)
	in := e.input
	in.Tenant, in.TaskID, in.Scope, in.Since, in.Window, in.Resolution = t.in.Tenant, t.in.TaskID, t.scope, since, t.in.ReconcileWindow, resolution
	settles := resolution == nil && t.since(ctx, changeSettleBySending)
	in.Resend = e.resends && settles
	if settles {
		defer workflow.SetCurrentDetails(ctx, "")
		workflow.SetCurrentDetails(ctx, reconcilingDetails(e, workflow.Now(ctx).Add(reconcileWindow(t.in.ReconcileWindow))))
	}
	var r contract.ReconcileResult
	err := workflow.ExecuteActivity(actx, contract.ActivityReconcile, in).Get(ctx, &r)
	// A reconciliation the ledger kept from running asked nothing: it is
	// waited out and run again, never read as indeterminate.
	for w, open := contract.BreakerWaitOf(err); waits && open && ctx.Err() == nil; w, open = contract.BreakerWaitOf(err) {
		if err := t.waitForBreaker(ctx, w.Breaker, w.Wait, w.OutageLimit, "the reconciliation of operation "+e.opID); err != nil {
			return r, err
		}
		err = workflow.ExecuteActivity(actx, contract.ActivityReconcile, in).Get(ctx, &r)
	}
	if err == nil {
		t.ledgerBack()
		return r, nil
	}
	if ctx.Err() != nil {
		return r, err
	}
	return contract.ReconcileResult{OperationID: e.opID, Verdict: capstan.VerdictIndeterminate,
		Reason: fmt.Sprintf("the reconciler could not finish: %v", err)}, nil
}

// markSettled updates the count of unknown operations.
func (t *task) markSettled(ctx workflow.Context) {
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrUnknownOps.ValueSet(int64(t.unknownOps())))
}

// reconcilingDetails is the task's current details while a reconciler
// looks for e's effect: what it looks for and the latest it is absent by
// (the window runs from the ledger's record of the send, no later than
// now; the reconciler's heartbeat, which starter follow shows, has the
// exact time).
func reconcilingDetails(e effect, by time.Time) string {
	return fmt.Sprintf("**Reconciling** operation `%s`: looking for the effect of %s; absent if not seen by %s at the latest.",
		e.opID, e.summary, by.UTC().Format("15:04:05 UTC"))
}

// reconcileWindow is the consistency window a task's reconciliations use.
func reconcileWindow(w time.Duration) time.Duration {
	if w <= 0 {
		return config.DefaultReconcileWindow
	}
	return w
}
