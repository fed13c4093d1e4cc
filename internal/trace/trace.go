// Package trace is capstan's OpenTelemetry tracing: the tracer provider a
// process exports its spans with over OTLP, the Temporal tracing
// interceptor (go.temporal.io/sdk/contrib/opentelemetry) made replay-safe
// for the workflow's own span, and the helpers the activities use for
// their spans' attributes (GenAI semantic conventions, pinned at semconv
// v1.41.0).
//
// Tracing is on when the standard OTLP variables name an endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// otherwise every tracer is OpenTelemetry's no-op one and nothing is
// exported. No attribute holds a prompt, a model's text, a tool's
// arguments or output unless CAPSTAN_TRACE_CONTENT=true, and then only
// through the worker's redactor.
package trace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// ScopeName is the instrumentation scope of capstan's own spans.
const ScopeName = "github.com/capstanhq/capstan"

// Propagator is how capstan carries a trace context: W3C traceparent and
// baggage, the same on Temporal headers, HTTP requests and MCP's _meta.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Enabled reports whether lookupEnv asks for traces to be exported: an
// OTLP endpoint is named (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT), OTEL_TRACES_EXPORTER is not "none" and
// OTEL_SDK_DISABLED is not "true".
func Enabled(lookupEnv func(string) (string, bool)) bool {
	get := func(k string) string { v, _ := lookupEnv(k); return strings.TrimSpace(v) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(get("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Provider is a process's tracing: its tracer provider and what ends it.
type Provider struct {
	tp       oteltrace.TracerProvider
	sdk      *sdktrace.TracerProvider // nil when tracing is off
	replay   *replaySafeTracer        // the interceptor's tracer; nil when off
	Endpoint string                   // where spans go, for the startup line; empty when off
}

// Off is tracing turned off: no-op tracers, no interceptor.
func Off() *Provider { return &Provider{tp: noop.NewTracerProvider()} }

// Setup builds the provider lookupEnv asks for (Enabled) for the service
// named service (OTEL_SERVICE_NAME overrides it; OTEL_RESOURCE_ATTRIBUTES
// adds to the resource). The exporter is OTLP over HTTP/protobuf, or over
// gRPC when OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or
// OTEL_EXPORTER_OTLP_PROTOCOL) is "grpc"; it reads the rest of the
// standard OTEL_EXPORTER_OTLP_* variables itself (headers, timeout,
// insecure, certificates). Setup dials nothing: an unreachable collector
// costs dropped spans, never a task. With tracing off it returns Off().
//
// Setup also makes the provider and Propagator OpenTelemetry's globals,
// for the instrumentation that reads them (otelhttp).
func Setup(ctx context.Context, lookupEnv func(string) (string, bool), service string) (*Provider, error) {
	if !Enabled(lookupEnv) {
		return Off(), nil
	}
	get := func(k string) string { v, _ := lookupEnv(k); return strings.TrimSpace(v) }
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	endpoint := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: capstan exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT): %w", err)
	}
	// Each process is an instance of its own (service.instance.id), so a
	// trace tells the workers that ran a task apart.
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceInstanceID(uuid.NewString())))
	if err == nil {
		var env *resource.Resource
		// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name.
		if env, err = resource.New(ctx, resource.WithFromEnv()); err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(newIDGenerator()),
	)
	p := &Provider{tp: sdk, sdk: sdk, Endpoint: endpoint}
	otel.SetTracerProvider(sdk)
	otel.SetTextMapPropagator(Propagator)
	active.Store(true)
	return p, nil
}

// active is set once a Setup in this process turned tracing on.
var active atomic.Bool

// Active reports whether this process exports traces (a Setup turned
// them on).
func Active() bool { return active.Load() }

// HTTPTransport is rt traced (otelhttp: a client span per request, and
// the trace context in its traceparent header) when this process exports
// traces; rt itself otherwise, at no cost.
func HTTPTransport(rt http.RoundTripper) http.RoundTripper {
	if !Active() {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt, otelhttp.WithPropagators(Propagator))
}

// On reports whether spans are exported.
func (p *Provider) On() bool { return p != nil && p.sdk != nil }

// TracerProvider is the provider's (no-op when off).
func (p *Provider) TracerProvider() oteltrace.TracerProvider {
	if p == nil {
		return noop.NewTracerProvider()
	}
	return p.tp
}

// WorkerInterceptors are the Temporal interceptors that trace a worker's
// workflows and activities: the SDK's OpenTelemetry interceptor, whose
// workflow span is replay-safe here (one span per workflow run, whatever
// replays the worker does), followed by the interceptor that tells that
// span its run completed. None when off.
func (p *Provider) WorkerInterceptors() ([]interceptor.WorkerInterceptor, error) {
	t, err := p.tracing()
	if t == nil || err != nil {
		return nil, err
	}
	return []interceptor.WorkerInterceptor{t, &completion{tracer: p.tp.Tracer(ScopeName)}}, nil
}

// ClientInterceptors are the interceptors that trace a client's starts,
// updates and signals, so that a task's trace begins where it is started.
// Give them to a client no worker is built on: a worker built on a client
// takes its client's interceptors as well as its own. None when off.
func (p *Provider) ClientInterceptors() ([]interceptor.ClientInterceptor, error) {
	t, err := p.tracing()
	if t == nil || err != nil {
		return nil, err
	}
	return []interceptor.ClientInterceptor{t}, nil
}

func (p *Provider) tracing() (interceptor.Interceptor, error) {
	if !p.On() {
		return nil, nil
	}
	if p.replay == nil {
		rt := &replaySafeTracer{}
		inner, err := temporalotel.NewTracer(temporalotel.TracerOptions{
			Tracer:            p.tp.Tracer("temporal-sdk-go"),
			TextMapPropagator: Propagator,
			SpanStarter:       rt.spanStarter,
			// `starter status` and `follow` query a task every fraction
			// of a second: a trace each would bury the task's own.
			DisableQueryTracing: true,
		})
		if err != nil {
			return nil, err
		}
		rt.Tracer = inner
		p.replay = rt
	}
	return interceptor.NewTracingInterceptor(p.replay), nil
}

// Shutdown flushes what is buffered and stops exporting, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// ForceFlush exports what is buffered now.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Tracer is capstan's tracer from the global provider: the one Setup
// made, or the no-op one.
func Tracer() oteltrace.Tracer { return otel.Tracer(ScopeName) }
