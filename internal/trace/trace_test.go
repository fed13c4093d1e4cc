package trace

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/capstanhq/capstan/internal/redact"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnabledByTheStandardVariables(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		if got := Enabled(env(tc.env)); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// With no endpoint, Setup is the no-op: no interceptors, spans that
// record nothing, and HTTP transports left as they are.
func TestOffIsNoOp(t *testing.T) {
	p, err := Setup(context.Background(), env(nil), "capstan-test")
	if err != nil {
		t.Fatal(err)
	}
	if p.On() {
		t.Fatal("tracing on without an endpoint")
	}
	if w, err := p.WorkerInterceptors(); err != nil || w != nil {
		t.Errorf("WorkerInterceptors() = %v, %v; want none", w, err)
	}
	if c, err := p.ClientInterceptors(); err != nil || c != nil {
		t.Errorf("ClientInterceptors() = %v, %v; want none", c, err)
	}
	_, span := StartToolCall(context.Background(), "x")
	if span.IsRecording() {
		t.Error("a span records with tracing off")
	}
	if Active() {
		t.Error("Active() with tracing off")
	}
}

func TestProtocolRefused(t *testing.T) {
	_, err := Setup(context.Background(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}), "capstan-test")
	if err == nil || !strings.Contains(err.Error(), "http/json") {
		t.Errorf("Setup with protocol http/json: %v, want it refused by name", err)
	}
}

// The workflow span's ids come from its run's key: a replay starts a span
// of the same ids, and only a completed one is ended (exported).
func TestWorkflowSpanIsReplaySafe(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(newIDGenerator()))
	rt := &replaySafeTracer{}
	inner, err := temporalotel.NewTracer(temporalotel.TracerOptions{Tracer: tp.Tracer("t"), SpanStarter: rt.spanStarter})
	if err != nil {
		t.Fatal(err)
	}
	rt.Tracer = inner
	start := func() interceptor.TracerSpan {
		s, err := rt.StartSpan(&interceptor.TracerStartSpanOptions{Operation: "RunWorkflow", Name: "AgentTask",
			Time: time.Unix(100, 0), IdempotencyKey: "WorkflowInboundInterceptor:default:task-1:run-1:1"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := start()
	first.Finish(&interceptor.TracerFinishSpanOptions{}) // evicted: dropped
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans ended by a run that never completed, want 0", n)
	}
	second := start() // the replay
	ctx := rt.ContextWithSpan(context.Background(), second)
	ws, ok := spanOf(ctx).(*workflowSpan)
	if !ok {
		t.Fatalf("the workflow span is %T, want *workflowSpan", spanOf(ctx))
	}
	ws.completed.Store(true)
	second.Finish(&interceptor.TracerFinishSpanOptions{})
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	firstCtx := spanOf(rt.ContextWithSpan(context.Background(), first)).SpanContext()
	if got := ended[0].SpanContext(); got.SpanID() != firstCtx.SpanID() || got.TraceID() != firstCtx.TraceID() {
		t.Errorf("the replay's span is %s/%s, the first run's %s/%s: want the same ids", got.TraceID(), got.SpanID(), firstCtx.TraceID(), firstCtx.SpanID())
	}
	// Another span (an activity's) gets fresh ids.
	other, err := rt.StartSpan(&interceptor.TracerStartSpanOptions{Operation: "RunActivity", Name: "ModelTurn", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if spanOf(rt.ContextWithSpan(context.Background(), other)).SpanContext().SpanID() == firstCtx.SpanID() {
		t.Error("an activity span took the workflow span's id")
	}
}

func TestContentMaskedAndCapped(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	Content{}.Set(span, "off", "the prompt")
	Content{On: true, Masker: redact.New("sk-secret")}.Set(span, "on", "key sk-secret "+strings.Repeat("é", ContentLimit))
	span.End()
	attrs := map[attribute.Key]string{}
	for _, kv := range rec.Ended()[0].Attributes() {
		attrs[kv.Key] = kv.Value.AsString()
	}
	if _, ok := attrs["off"]; ok {
		t.Error("content set with CAPSTAN_TRACE_CONTENT off")
	}
	on := attrs["on"]
	if strings.Contains(on, "sk-secret") || !strings.HasPrefix(on, "key [redacted] ") || len(on) > ContentLimit+len("…") || !strings.HasSuffix(on, "…") {
		t.Errorf("content = %.60q… (%d bytes), want masked and capped at %d", on, len(on), ContentLimit)
	}
}

func spanOf(ctx context.Context) oteltrace.Span { return oteltrace.SpanFromContext(ctx) }
