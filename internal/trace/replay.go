package trace

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// This file makes the workflow's span replay-safe. The SDK's interceptor
// starts a RunWorkflow span each time a worker runs a workflow from its
// start: once on the run's first workflow task, and again on every replay
// (a workflow evicted from the sticky cache, a worker restarted, a query
// on a workflow no longer cached). A replay that ends as the worker drops
// the workflow would end and export that span too early, and the replay
// that goes on would start another: two spans for one task, and the
// activities scheduled before the eviction hanging from the first.
//
// So here the workflow's span has an id derived from the run (the SDK's
// idempotency key: namespace, workflow id, run id and a counter), the same
// on every replay, and it is exported once, by the execution in which the
// workflow function returns outside replay: the run's real end. An
// update's handler span (HandleUpdate), which the SDK also starts again on
// replay with an idempotency key, is treated the same. Spans the
// interceptor starts for activities and signals are started only outside
// replay already. Nothing here changes a workflow's commands or
// history.

// replaySafeTracer is the SDK's OpenTelemetry tracer but for the workflow
// span's id and end.
type replaySafeTracer struct {
	interceptor.Tracer
	mu      sync.Mutex
	pending string // the idempotency key of the span being started, under mu
}

func (t *replaySafeTracer) StartSpan(opts *interceptor.TracerStartSpanOptions) (interceptor.TracerSpan, error) {
	if opts.IdempotencyKey == "" {
		return t.Tracer.StartSpan(opts)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = opts.IdempotencyKey
	defer func() { t.pending = "" }()
	return t.Tracer.StartSpan(opts)
}

// spanStarter is the SDK tracer's SpanStarter: a span with an idempotency
// key (the workflow's) gets its id from the key and waits for its run's
// completion to be exported.
func (t *replaySafeTracer) spanStarter(ctx context.Context, tr oteltrace.Tracer, name string, opts ...oteltrace.SpanStartOption) oteltrace.Span {
	key := t.pending // StartSpan holds mu while the SDK's tracer calls this
	if key == "" {
		_, span := tr.Start(ctx, name, opts...)
		return span
	}
	_, span := tr.Start(context.WithValue(ctx, seedKey{}, key), name, opts...)
	return &workflowSpan{Span: span}
}

// workflowSpan is a workflow run's span: End exports it only once the run
// completed outside replay (completion).
type workflowSpan struct {
	oteltrace.Span
	completed atomic.Bool
}

func (s *workflowSpan) End(opts ...oteltrace.SpanEndOption) {
	if s.completed.Load() {
		s.Span.End(opts...)
	}
	// Otherwise the worker is dropping a run it replayed or had cached:
	// the execution that completes the run ends a span of the same id.
}

// completion is the worker interceptor, inside the tracing one, that
// marks the workflow's span completed when the workflow function returns
// outside replay, and traces the approval waits (approvalWaits).
type completion struct {
	interceptor.WorkerInterceptorBase
	tracer oteltrace.Tracer
}

func (c *completion) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &completionInbound{tracer: c.tracer}
	i.Next = next
	return i
}

type completionInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	tracer oteltrace.Tracer
}

func (i *completionInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &approvalWaits{tracer: i.tracer, asked: map[string]time.Time{}}
	o.Next = outbound
	return i.Next.Init(o)
}

func (i *completionInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	ret, err := i.Next.ExecuteWorkflow(ctx, in)
	completed(ctx)
	return ret, err
}

// ExecuteUpdate is the same for an update's handler, which the SDK runs
// again on replay (HandleUpdate:NAME, whose span has an idempotency key
// too): its span is exported by the execution that returns outside
// replay.
func (i *completionInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	ret, err := i.Next.ExecuteUpdate(ctx, in)
	completed(ctx)
	return ret, err
}

// completed marks the span of ctx (the workflow's, an update's) as ending
// outside replay: End exports it.
func completed(ctx workflow.Context) {
	if workflow.IsReplaying(ctx) {
		return
	}
	if span, ok := temporalotel.SpanFromWorkflowContext(ctx); ok {
		if ws, ok := span.(*workflowSpan); ok {
			ws.completed.Store(true)
		}
	}
}

// seedKey carries, in the context a span starts with, the key its ids are
// derived from.
type seedKey struct{}

// idGenerator is the SDK's random ids, but for a span started with a
// seed: its span id (and its trace id, when it has no parent) is derived
// from the seed, the same on every replay.
type idGenerator struct {
	mu  sync.Mutex
	rnd *rand.ChaCha8
}

func newIDGenerator() *idGenerator {
	var seed [32]byte
	for i := range 4 {
		binary.LittleEndian.PutUint64(seed[i*8:], rand.Uint64())
	}
	return &idGenerator{rnd: rand.NewChaCha8(seed)}
}

func (g *idGenerator) NewIDs(ctx context.Context) (oteltrace.TraceID, oteltrace.SpanID) {
	if seed, ok := ctx.Value(seedKey{}).(string); ok {
		sum := sha256.Sum256([]byte("capstan trace " + seed))
		var tid oteltrace.TraceID
		var sid oteltrace.SpanID
		copy(tid[:], sum[:16])
		copy(sid[:], sum[16:24])
		return tid, nonZeroSpan(sid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid oteltrace.TraceID
	var sid oteltrace.SpanID
	for !tid.IsValid() {
		_, _ = g.rnd.Read(tid[:])
	}
	for !sid.IsValid() {
		_, _ = g.rnd.Read(sid[:])
	}
	return tid, sid
}

func (g *idGenerator) NewSpanID(ctx context.Context, traceID oteltrace.TraceID) oteltrace.SpanID {
	if seed, ok := ctx.Value(seedKey{}).(string); ok {
		sum := sha256.Sum256([]byte("capstan span " + traceID.String() + " " + seed))
		var sid oteltrace.SpanID
		copy(sid[:], sum[:8])
		return nonZeroSpan(sid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var sid oteltrace.SpanID
	for !sid.IsValid() {
		_, _ = g.rnd.Read(sid[:])
	}
	return sid
}

func nonZeroSpan(sid oteltrace.SpanID) oteltrace.SpanID {
	if !sid.IsValid() {
		sid[7] = 1
	}
	return sid
}
