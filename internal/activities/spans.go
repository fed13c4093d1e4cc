package activities

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	captrace "github.com/capstanhq/capstan/internal/trace"
)

// This file is the activities' spans (internal/trace): each a child of the
// activity's RunActivity span, which the worker's tracing interceptor
// starts per attempt. Their attributes are ids, names, counts and
// outcomes; content (a model's answer, a tool's arguments) only with
// CAPSTAN_TRACE_CONTENT, through the redactor. With tracing off they are
// OpenTelemetry's no-op spans.

// content is what the activities' spans may carry.
func (a *Activities) content() captrace.Content {
	c := captrace.Content{On: a.TraceContent}
	if a.Redactor != nil {
		c.Masker = a.Redactor
	}
	return c
}

// startAttemptSpan starts a model attempt's span.
func (a *Activities) startAttemptSpan(ctx context.Context, in contract.ModelTurnInput, provider model.Provider, req model.Request) (context.Context, oteltrace.Span) {
	attrs := []attribute.KeyValue{captrace.KeyTaskID.String(in.TaskID), captrace.KeyTurnID.String(in.TurnID),
		captrace.KeyAttemptID.String(in.AttemptID)}
	if in.Compact {
		attrs = append(attrs, captrace.KeyCompact.Bool(true))
	}
	return captrace.StartModelAttempt(ctx, provider.Name(), req.Model, attrs...)
}

// endAttemptSpan ends it with what the attempt got to: the usage and
// finish reason of a completed one, or its outcome and phase.
func (a *Activities) endAttemptSpan(span oteltrace.Span, out model.Output, p model.Progress, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		errType := ""
		if rep, ok := contract.AttemptReportOf(err); ok {
			span.SetAttributes(captrace.KeyOutcome.String(string(rep.Outcome)), captrace.KeyPhase.String(string(rep.Phase)))
			errType = string(rep.Outcome)
			if rep.HTTPStatus != 0 {
				span.SetAttributes(semconv.HTTPResponseStatusCode(rep.HTTPStatus))
			}
		}
		captrace.End(span, a.masked(err), errType)
		return
	}
	span.SetAttributes(captrace.Usage(out.Usage.InputTokens, out.Usage.OutputTokens, out.FinishReason)...)
	span.SetAttributes(captrace.KeyOutcome.String(string(model.OutcomeCompleted)), captrace.KeyPhase.String(string(p.Phase)),
		captrace.KeyUsageEstimate.Bool(out.Usage == model.Usage{}))
	if c := a.content(); c.On {
		c.Set(span, semconv.GenAIOutputMessagesKey, outputMessages(out))
	}
	captrace.End(span, nil, "")
}

// outputMessages is out as gen_ai.output.messages has it: one assistant
// message of text parts and tool calls.
func outputMessages(out model.Output) string {
	type part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}
	var parts []part
	if out.Text != "" {
		parts = append(parts, part{Type: "text", Content: out.Text})
	}
	for _, c := range out.ToolCalls {
		parts = append(parts, part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	b, _ := json.Marshal([]map[string]any{{"role": "assistant", "parts": parts, "finish_reason": out.FinishReason}})
	return string(b)
}

// masked is err with the worker's secrets masked, for a span's status.
func (a *Activities) masked(err error) error {
	if err == nil || a.Redactor == nil {
		return err
	}
	return a.Redactor.Error(err)
}

// errorType is the application error type of err, for error.type.
func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

// startToolSpan starts a tool call's span, "execute_tool TOOL", with the
// tool's safety class.
func (a *Activities) startToolSpan(ctx context.Context, in contract.ExecuteToolInput) (context.Context, oteltrace.Span) {
	attrs := []attribute.KeyValue{captrace.KeyTaskID.String(in.TaskID), captrace.KeyTurnID.String(in.TurnID),
		captrace.KeyOperationID.String(in.OperationID), semconv.GenAIToolCallID(in.ToolCallID)}
	if impl, err := a.Tools.Get(in.Tool); err == nil {
		attrs = append(attrs, captrace.KeyToolClass.String(string(impl.Class())))
	}
	ctx, span := captrace.StartToolCall(ctx, in.Tool, attrs...)
	if c := a.content(); c.On && in.Arguments != "" {
		if args, err := a.Ledger.GetItem(ctx, in.Arguments); err == nil {
			c.Set(span, semconv.GenAIToolCallArgumentsKey, string(args))
		}
	}
	return ctx, span
}

// endToolSpan ends it with the policy's decision and the outcome.
func (a *Activities) endToolSpan(span oteltrace.Span, in contract.ExecuteToolInput, res contract.ExecuteToolResult, err error) {
	if !span.IsRecording() {
		return
	}
	if d := res.Decision; d != nil {
		span.SetAttributes(captrace.KeyPolicyEffect.String(d.Effect), captrace.KeyPolicyRule.String(d.Rule))
	}
	switch {
	case in.Approval != nil:
		span.SetAttributes(attribute.String("capstan.approval", "approved"))
	case in.Denial != nil:
		span.SetAttributes(attribute.String("capstan.approval", "denied"))
	}
	if res.State != "" {
		span.SetAttributes(captrace.KeyOutcome.String(string(res.State)))
	}
	if in.LedgerOnly {
		span.SetAttributes(attribute.Bool("capstan.ledger_only", true))
	}
	if res.Replayed {
		span.SetAttributes(captrace.KeyReplayed.Bool(true))
	}
	captrace.End(span, a.masked(err), errorType(err))
}

// startReconcileSpan starts a reconcile's span.
func startReconcileSpan(ctx context.Context, in contract.ReconcileInput) (context.Context, oteltrace.Span) {
	return captrace.Start(ctx, captrace.SpanReconcile, oteltrace.WithAttributes(
		captrace.KeyTaskID.String(in.TaskID), captrace.KeyOperationID.String(in.OperationID)))
}

// endReconcileSpan ends it with the verdict, the outcome and how many
// times the external system was asked.
func (a *Activities) endReconcileSpan(span oteltrace.Span, res contract.ReconcileResult, err error) {
	if span.IsRecording() {
		span.SetAttributes(captrace.KeyVerdict.String(string(res.Verdict)), captrace.KeyOutcome.String(string(res.State)),
			attribute.Int("capstan.reconcile.asked", res.Asked))
	}
	captrace.End(span, a.masked(err), errorType(err))
}
