package trace

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/contract"
)

// approvalWaits is the workflow outbound interceptor that traces the time
// an operation waited for a person: from the first ExecuteTool the
// workflow scheduled for it to the one that carries a person's answer (or
// the approval's timeout), an approval_wait span under the workflow's.
// It reads the activities' inputs only: the times are the workflow's
// (workflow.Now), the same on every replay, and the span is ended once,
// by the execution that schedules the answered call outside replay.
type approvalWaits struct {
	interceptor.WorkflowOutboundInterceptorBase
	tracer oteltrace.Tracer
	// asked holds, by operation id, when the workflow first scheduled the
	// operation's ExecuteTool; rebuilt by a replay.
	asked map[string]time.Time
}

func (o *approvalWaits) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if activityType == contract.ActivityExecuteTool && len(args) == 1 {
		if in, ok := args[0].(contract.ExecuteToolInput); ok {
			o.observe(ctx, in)
		}
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *approvalWaits) observe(ctx workflow.Context, in contract.ExecuteToolInput) {
	now := o.Next.Now(ctx)
	since, seen := o.asked[in.OperationID]
	if !seen {
		o.asked[in.OperationID] = now
		return
	}
	if (in.Approval == nil && in.Denial == nil) || o.Next.IsReplaying(ctx) {
		return
	}
	parent, ok := temporalotel.SpanFromWorkflowContext(ctx)
	if !ok {
		return
	}
	answer, by := "approved", ""
	switch {
	case in.Approval != nil:
		by = in.Approval.By
	case in.Denial.By == "":
		answer = "timed_out"
	default:
		answer, by = "denied", in.Denial.By
	}
	attrs := []attribute.KeyValue{KeyTaskID.String(in.TaskID), KeyOperationID.String(in.OperationID),
		attribute.String("gen_ai.tool.name", in.Tool), attribute.String("capstan.approval", answer)}
	if by != "" {
		attrs = append(attrs, attribute.String("capstan.approval.by", by))
	}
	_, span := o.tracer.Start(oteltrace.ContextWithSpan(context.Background(), parent), SpanApprovalWait,
		oteltrace.WithTimestamp(since), oteltrace.WithAttributes(attrs...))
	span.End(oteltrace.WithTimestamp(now))
	delete(o.asked, in.OperationID)
}
