package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/ledger"
)

// maxDeliveryTries is how often a delivery is sent before it is
// dead-lettered (docs/design.md §6): Temporal's tries of one Deliver, and
// the sends after a reconciler confirmed an earlier one absent.
const maxDeliveryTries = 3

// deliver posts the final answer to the task's Slack channel, if it has one.
// "final response committed" and "delivery acked" are separate journal lines:
// the answer is part of the task's result whether or not the post lands.
func (t *task) deliver(ctx workflow.Context, text string) error {
	if t.in.SlackChannel == "" {
		return nil
	}
	opID := deliveryOperationID(t.in.Tenant, t.in.TaskID, t.in.SlackChannel)
	t.result.Deliveries = append(t.result.Deliveries, DeliveryRecord{OperationID: opID, Target: "slack:" + t.in.SlackChannel, State: DeliverySending})
	rec := &t.result.Deliveries[len(t.result.Deliveries)-1]
	rec.Tries = 1
	unknown, err := t.post(ctx, rec, text)
	if err != nil || unknown == "" {
		return err
	}
	if workflow.GetVersion(ctx, changeReconcile, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		rec.State = DeliveryUnknown
		return fail(FailOperationUnknown, "the delivery to Slack %s may have been posted: %s", t.in.SlackChannel, unknown)
	}
	rec.State = DeliveryUnknown
	_, err = t.recover(ctx, t.deliveryEffect(rec, text), unknown)
	return err
}

// post runs one Deliver (with Temporal's retries) and settles its record.
// An outcome nobody knows is returned as unknown; every other failure
// dead-letters the delivery and ends the task.
func (t *task) post(ctx workflow.Context, rec *DeliveryRecord, text string) (unknown string, err error) {
	rec.State = DeliverySending
	actx := workflow.WithActivityOptions(ctx, deliverOptions("deliver to slack "+t.in.SlackChannel, t.in.ModelLimits))
	var res activities.DeliverResult
	err = workflow.ExecuteActivity(actx, a.Deliver, activities.DeliverInput{
		Tenant: t.in.Tenant, TaskID: t.in.TaskID, OperationID: rec.OperationID, Channel: t.in.SlackChannel, Text: text,
	}).Get(ctx, &res)
	if err == nil {
		rec.State, rec.ExternalID = DeliveryAcked, res.ExternalID
		t.note(ctx, "delivery %s acked (%s)", rec.OperationID, res.ExternalID)
		return "", nil
	}
	if ctx.Err() != nil {
		if st, _ := cancelledState(err); st == ledger.StateUnknown {
			rec.State = DeliveryUnknown
		} else {
			rec.State = DeliveryDeadLetter
		}
		return "", err
	}
	var appErr *temporal.ApplicationError
	var timeoutErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr) && (appErr.Type() == activities.ErrTypeOperationUnknown || appErr.Type() == activities.ErrTypeOperationInProgress):
		return appErr.Error(), nil
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeOperationConflict:
		t.deadLetter(ctx, rec)
		return "", fail(FailOperationConflict, "%s", appErr.Error())
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeWorkerConfig:
		t.deadLetter(ctx, rec)
		return "", fail(FailWorkerMisconfigured, "%s", appErr.Error())
	case errors.As(err, &timeoutErr) && t.reconciles(ctx):
		// The worker was lost while it posted: the message may be there.
		return fmt.Sprintf("the worker posting to Slack %s stopped answering (%s timeout)", t.in.SlackChannel, timeoutErr.TimeoutType()), nil
	}
	t.deadLetter(ctx, rec)
	return "", fail(FailDeliveryFailed, "the final answer could not be delivered to Slack %s: %v", t.in.SlackChannel, err)
}

// deadLetter gives up on a delivery. Tasks that reconcile also mark it in
// their search attributes, so dead letters can be found
// (CapstanDeadLetter = true).
func (t *task) deadLetter(ctx workflow.Context, rec *DeliveryRecord) {
	rec.State = DeliveryDeadLetter
	if t.reconciles(ctx) {
		_ = workflow.UpsertTypedSearchAttributes(ctx, AttrDeadLetter.ValueSet(true))
	}
}

// reconciles reports whether this task settles unknown outcomes by asking
// (changeReconcile) rather than failing on them.
func (t *task) reconciles(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeReconcile, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// deliveryEffect is a delivery as recover sees it: re-sent after a
// confirmed absent until maxDeliveryTries sends, then dead-lettered.
func (t *task) deliveryEffect(rec *DeliveryRecord, text string) effect {
	return effect{
		opID:         rec.OperationID,
		summary:      "delivery to slack " + t.in.SlackChannel,
		input:        activities.ReconcileInput{OperationID: rec.OperationID, Channel: t.in.SlackChannel},
		reexecutions: maxDeliveryTries - 1,
		execute: func(ctx workflow.Context) (string, string, error) {
			unknown, err := t.post(ctx, rec, text)
			if err == nil && unknown != "" {
				rec.State = DeliveryUnknown
			}
			return "", unknown, err
		},
		found: func(r activities.ReconcileResult) {
			rec.State, rec.ExternalID, rec.Recovered = DeliveryAcked, r.ExternalID, true
		},
		reconciling: func() { rec.State = DeliveryReconciling },
		absent:      func(r activities.ReconcileResult, n int) { rec.State, rec.Tries = DeliveryRetryScheduled, n+1 },
		person:      func(string) { rec.State = DeliveryNeedsHuman },
		exhausted: func(ctx workflow.Context, r activities.ReconcileResult) error {
			t.deadLetter(ctx, rec)
			return fail(FailDeliveryFailed, "the final answer could not be delivered to Slack %s after %d tries: %s", t.in.SlackChannel, maxDeliveryTries, r.Reason)
		},
	}
}
