package trace

import (
	"context"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// The attributes of capstan's spans beside the GenAI semantic
// conventions'. Each holds an id, a name, a count or an outcome: never
// content (Content decides that).
const (
	KeyTaskID        = attribute.Key("capstan.task_id")
	KeyTurnID        = attribute.Key("capstan.turn_id")
	KeyAttemptID     = attribute.Key("capstan.attempt_id")
	KeyOperationID   = attribute.Key("capstan.operation_id")
	KeyToolClass     = attribute.Key("capstan.tool.class")
	KeyPolicyEffect  = attribute.Key("capstan.policy.decision")
	KeyPolicyRule    = attribute.Key("capstan.policy.rule")
	KeyOutcome       = attribute.Key("capstan.outcome")
	KeyReplayed      = attribute.Key("capstan.replayed")
	KeyPhase         = attribute.Key("capstan.model.phase")
	KeyUsageEstimate = attribute.Key("capstan.usage.estimated")
	KeyVerdict       = attribute.Key("capstan.reconcile.verdict")
	KeyCompact       = attribute.Key("capstan.compact")
)

// Span names of capstan's own spans.
const (
	// SpanChat is a model attempt's, followed by the model's name
	// (GenAI: "{gen_ai.operation.name} {gen_ai.request.model}").
	SpanChat = "chat"
	// SpanExecuteTool is a tool call's, followed by the tool's name.
	SpanExecuteTool = "execute_tool"
	// SpanReconcile is a reconcile's, followed by the tool's name.
	SpanReconcile = "reconcile"
	// SpanApprovalWait is the time an operation waited for a person.
	SpanApprovalWait = "approval_wait"
)

// ContentLimit bounds, in bytes, a content attribute CAPSTAN_TRACE_CONTENT
// lets through.
const ContentLimit = 4096

// StartModelAttempt starts the span of one model attempt, a child of the
// activity's: "chat MODEL", with the GenAI request attributes.
func StartModelAttempt(ctx context.Context, provider, model string, attrs ...attribute.KeyValue) (context.Context, oteltrace.Span) {
	attrs = append([]attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(providerName(provider)),
		semconv.GenAIRequestModel(model)}, attrs...)
	return Tracer().Start(ctx, SpanChat+" "+model, oteltrace.WithSpanKind(oteltrace.SpanKindClient), oteltrace.WithAttributes(attrs...))
}

// providerName is capstan's provider as gen_ai.provider.name names it.
func providerName(p string) string {
	switch p {
	case "openai":
		return semconv.GenAIProviderNameOpenAI.Value.AsString()
	case "anthropic":
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	}
	return p
}

// Usage is the GenAI usage and finish reason attributes of an attempt.
func Usage(input, output int64, finishReason string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.GenAIUsageInputTokens(int(input)), semconv.GenAIUsageOutputTokens(int(output))}
	if finishReason != "" {
		attrs = append(attrs, semconv.GenAIResponseFinishReasons(finishReason))
	}
	return attrs
}

// StartToolCall starts the span of one tool call: "execute_tool TOOL".
func StartToolCall(ctx context.Context, tool string, attrs ...attribute.KeyValue) (context.Context, oteltrace.Span) {
	attrs = append([]attribute.KeyValue{semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(tool)}, attrs...)
	return Tracer().Start(ctx, SpanExecuteTool+" "+tool, oteltrace.WithSpanKind(oteltrace.SpanKindInternal), oteltrace.WithAttributes(attrs...))
}

// Start starts one of capstan's other spans (reconcile, approval wait).
func Start(ctx context.Context, name string, opts ...oteltrace.SpanStartOption) (context.Context, oteltrace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// End ends span with err's status: an error's type (error.type) and its
// message, which the caller has masked, or OK. errType is the
// application error type when there is one.
func End(span oteltrace.Span, err error, errType string) {
	if err != nil {
		if errType == "" {
			errType = "_OTHER"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Masker masks secrets in a string (the worker's redact.Redactor).
type Masker interface{ String(string) string }

// Content is what CAPSTAN_TRACE_CONTENT lets spans carry: nothing when
// off; with it, content through the worker's masker, capped at
// ContentLimit.
type Content struct {
	On     bool
	Masker Masker
}

// Set puts s on span as key when content is on, masked and capped.
func (c Content) Set(span oteltrace.Span, key attribute.Key, s string) {
	if !c.On || s == "" || !span.IsRecording() {
		return
	}
	if c.Masker != nil {
		s = c.Masker.String(s)
	}
	if len(s) > ContentLimit {
		cut := ContentLimit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = strings.ToValidUTF8(s[:cut], "") + "…"
	}
	span.SetAttributes(key.String(s))
}
