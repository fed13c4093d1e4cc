package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

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
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if t.result.Status == StatusCancelled {
		t.settleCancelled(dctx)
	}
	if t.result.Message != "" {
		t.note(ctx, "task %s: %s", t.result.Status, t.result.Message)
	} else {
		t.note(ctx, "task %s", t.result.Status)
	}
	attrs := []temporal.SearchAttributeUpdate{AttrStatus.ValueSet(string(t.result.Status)), AttrUnknownOps.ValueSet(int64(t.unknownOps()))}
	attrs = append(attrs, t.finalFlags(ctx)...)
	if uerr := workflow.UpsertTypedSearchAttributes(dctx, attrs...); uerr != nil {
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
