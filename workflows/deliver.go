package workflows

import (
	"errors"

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
	actx := workflow.WithActivityOptions(ctx, deliverOptions("deliver to slack "+t.in.SlackChannel, t.in.ModelLimits))
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
