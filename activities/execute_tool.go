package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools"
)

// ExecuteTool performs one operation at most once (docs/design.md §5.4):
//
//  1. claim the operation in the ledger; if it already SUCCEEDED, return the
//     stored result without calling anything (Replayed);
//  2. mark it RUNNING and call the tool;
//  3. record SUCCEEDED with the external id, FAILED for a definite refusal,
//     ABSENT when provably nothing was sent, and UNKNOWN when the request may
//     have acted — a timeout after the request left is never FAILED.
//
// An UNKNOWN operation is returned as an ErrTypeOperationUnknown error that
// Temporal does not retry: only a reconciler may decide what happened.
func (a *Activities) ExecuteTool(ctx context.Context, in ExecuteToolInput) (ExecuteToolResult, error) {
	res := ExecuteToolResult{OperationID: in.OperationID}
	tool, err := a.Tools.Get(in.Tool)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeWorkerConfig, nil)
	}
	args, err := a.Ledger.GetItem(ctx, in.Arguments)
	if err != nil {
		return res, fmt.Errorf("load arguments of operation %s: %w", in.OperationID, err)
	}
	id, err := tool.Identify(args)
	if err != nil {
		// The model turn validated these arguments; reaching here means the
		// tool changed under a running task. Tell the model, act on nothing.
		return a.refused(ctx, in, res, err)
	}

	rec, done, err := a.begin(ctx, ledger.Operation{
		ID: in.OperationID, Tenant: in.Tenant, TaskID: in.TaskID, TurnID: in.TurnID,
		ToolCallID: in.ToolCallID, Kind: in.Tool, BusinessKey: id.BusinessKey,
		RequestHash: RequestHash(in.Tool, id.Effect),
	})
	if err != nil {
		return res, err
	}
	if done {
		res.Replayed = true
		return a.succeeded(ctx, in, res, rec.ExternalID, rec.Result)
	}
	fence := rec.Fence
	activity.RecordHeartbeat(ctx, in.OperationID)
	out, callErr := tool.Execute(ctx, tools.Call{OperationID: in.OperationID, Arguments: args})
	if callErr == nil {
		// Recorded even if the activity is being cancelled: it happened.
		if err := a.Ledger.Complete(context.WithoutCancel(ctx), ledger.Completion{ID: in.OperationID, Fence: fence,
			State: ledger.StateSucceeded, ExternalID: out.ExternalID, Result: out.Output}); err != nil {
			// The effect happened but we could not record it: the next
			// attempt will find RUNNING and must reconcile.
			return res, fmt.Errorf("record success of operation %s: %w", in.OperationID, err)
		}
		return a.succeeded(ctx, in, res, out.ExternalID, out.Output)
	}

	verdict := tools.Classify(callErr)
	if (tool.Class() == tools.ReadOnly || tool.Class() == tools.Idempotent) && verdict != tools.VerdictFailed {
		// Nothing to reconcile for a read, nor for a write that is safe to
		// repeat with the same operation id: mark it ABSENT so the retry may
		// claim it, and let Temporal retry.
		_ = a.Ledger.Complete(context.WithoutCancel(ctx), ledger.Completion{ID: in.OperationID, Fence: fence,
			State: ledger.StateAbsent, Error: callErr.Error()})
		return res, fmt.Errorf("%s: %w", in.Tool, callErr)
	}
	switch verdict {
	case tools.VerdictFailed:
		if err := a.Ledger.Complete(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: ledger.StateFailed, Error: callErr.Error()}); err != nil {
			return res, fmt.Errorf("record failure of operation %s: %w", in.OperationID, err)
		}
		return a.refused(ctx, in, res, callErr)
	case tools.VerdictNotSent:
		if err := a.Ledger.Complete(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: ledger.StateAbsent, Error: callErr.Error()}); err != nil {
			return res, fmt.Errorf("record operation %s as not sent: %w", in.OperationID, err)
		}
		return res, fmt.Errorf("%s was not sent: %w", in.Tool, callErr) // safe to retry
	default: // unknown or cancelled after the request may have left
		if err := a.Ledger.Complete(context.WithoutCancel(ctx), ledger.Completion{ID: in.OperationID, Fence: fence,
			State: ledger.StateUnknown, Error: callErr.Error()}); err != nil {
			return res, fmt.Errorf("record operation %s as unknown: %w", in.OperationID, err)
		}
		return res, unknownOperation(in.OperationID, ledger.StateUnknown, callErr)
	}
}

// succeeded commits the tool message for a successful (or replayed) call.
func (a *Activities) succeeded(ctx context.Context, in ExecuteToolInput, res ExecuteToolResult, externalID string, output []byte) (ExecuteToolResult, error) {
	content := string(output)
	if res.Replayed {
		content = `{"replayed":true,"note":"this operation had already succeeded; nothing was sent again","result":` + orNull(output) + `}`
	}
	item, err := a.putMessage(ctx, model.Message{Role: model.RoleTool, ToolCallID: in.ToolCallID, Content: content})
	if err != nil {
		return res, err
	}
	res.State, res.ExternalID, res.Item, res.Preview = ledger.StateSucceeded, externalID, item, preview(content)
	return res, nil
}

// refused tells the model its call was refused; the task goes on.
func (a *Activities) refused(ctx context.Context, in ExecuteToolInput, res ExecuteToolResult, cause error) (ExecuteToolResult, error) {
	body, _ := json.Marshal(map[string]string{"error": cause.Error()})
	item, err := a.putMessage(ctx, model.Message{Role: model.RoleTool, ToolCallID: in.ToolCallID, Content: string(body)})
	if err != nil {
		return res, err
	}
	res.State, res.Item, res.Preview = ledger.StateFailed, item, preview(string(body))
	return res, nil
}

func orNull(b []byte) string {
	if len(b) == 0 || !json.Valid(b) {
		return "null"
	}
	return string(b)
}
