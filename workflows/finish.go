package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/activities"
)

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
	actx := workflow.WithActivityOptions(ctx, deliverOptions("deliver to slack "+t.in.SlackChannel))
	var res activities.DeliverResult
	err := workflow.ExecuteActivity(actx, a.Deliver, activities.DeliverInput{
		Tenant: t.in.Tenant, TaskID: t.in.TaskID, OperationID: opID, Channel: t.in.SlackChannel, Text: text,
	}).Get(ctx, &res)
	if err == nil {
		rec.State, rec.ExternalID = DeliveryAcked, res.ExternalID
		t.note(ctx, "delivery %s acked (%s)", opID, res.ExternalID)
		return nil
	}
	if ctx.Err() != nil {
		rec.State = DeliveryUnknown
		return err
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case activities.ErrTypeOperationUnknown, activities.ErrTypeOperationInProgress:
			rec.State = DeliveryUnknown
			return fail(FailOperationUnknown, "the delivery to Slack %s may have been posted: %s", t.in.SlackChannel, appErr.Error())
		case activities.ErrTypeOperationConflict:
			rec.State = DeliveryDeadLetter
			return fail(FailOperationConflict, "%s", appErr.Error())
		case activities.ErrTypeWorkerConfig:
			rec.State = DeliveryDeadLetter
			return fail(FailWorkerMisconfigured, "%s", appErr.Error())
		}
	}
	rec.State = DeliveryDeadLetter
	return fail(FailDeliveryFailed, "the final answer could not be delivered to Slack %s: %v", t.in.SlackChannel, err)
}

// finish settles the task's status, search attributes and result. A failed
// task fails its workflow with the failure code as the error type and the
// result as details, so the Temporal UI shows why and `starter` can print it.
func (t *task) finish(ctx workflow.Context, err error) (TaskResult, error) {
	var can *workflow.ContinueAsNewError
	if errors.As(err, &can) {
		return TaskResult{}, err
	}
	var te *taskError
	switch {
	case err == nil:
		t.result.Status = StatusCompleted
	case temporal.IsCanceledError(err) || errors.Is(ctx.Err(), workflow.ErrCanceled):
		t.result.Status, t.result.Message = StatusCancelled, "the task was cancelled"
	case errors.As(err, &te):
		t.result.Status, t.result.FailureCode, t.result.Message = StatusFailed, te.code, te.msg
	default:
		t.result.Status, t.result.FailureCode, t.result.Message = StatusFailed, FailInternalError, fmt.Sprintf("capstan stopped on an unexpected error: %v", err)
	}
	if t.result.Message != "" {
		t.note(ctx, "task %s: %s", t.result.Status, t.result.Message)
	} else {
		t.note(ctx, "task %s", t.result.Status)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if uerr := workflow.UpsertTypedSearchAttributes(dctx, AttrStatus.ValueSet(string(t.result.Status)), AttrUnknownOps.ValueSet(int64(t.unknownOps()))); uerr != nil {
		workflow.GetLogger(ctx).Warn("could not update search attributes", "Error", uerr)
	}
	switch t.result.Status {
	case StatusCompleted:
		return t.result, nil
	case StatusCancelled:
		return t.result, temporal.NewCanceledError(t.result)
	default:
		return t.result, temporal.NewNonRetryableApplicationError(t.result.Message, string(t.result.FailureCode), nil, t.result)
	}
}
