// Package metrics is a worker's Prometheus endpoint (docs/design.md §8):
// capstan's own counters — model attempts, tokens, retries, operations,
// reconcile verdicts, deliveries, breakers — and the Temporal SDK's worker
// metrics, bridged through OpenTelemetry, in one registry served on one
// address (CAPSTAN_METRICS_ADDR).
//
// Every method of *Metrics is safe for concurrent use, and a nil *Metrics
// records nothing, so code can hold one whether or not the worker serves
// metrics.
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/model"
)

// Namespace prefixes every capstan metric.
const Namespace = "capstan"

// Breaker states as the breaker state gauge labels them; they are the
// strings of gobreaker's states.
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half-open"
	BreakerOpen     = "open"
)

var breakerStates = []string{BreakerClosed, BreakerHalfOpen, BreakerOpen}

// latencyBuckets are the histogram buckets, in seconds, of the Temporal
// SDK's timers (task latency, activity latency, poll latency): from a few
// milliseconds to an hour, since a task may wait on a person or a breaker.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Metrics holds a worker's metrics and the registry they are served from.
type Metrics struct {
	registry *prometheus.Registry
	provider *sdkmetric.MeterProvider
	temporal client.MetricsHandler

	attempts           *prometheus.CounterVec
	tokens             *prometheus.CounterVec
	retries            *prometheus.CounterVec
	operations         *prometheus.CounterVec
	verdicts           *prometheus.CounterVec
	deliveries         *prometheus.CounterVec
	policyDecisions    *prometheus.CounterVec
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
}

// New registers capstan's metrics, the Go runtime's and the process's in a
// new registry, and bridges the Temporal SDK's metrics into it (see
// TemporalHandler). logger receives the bridge's errors; nil discards them.
func New(logger *slog.Logger) (*Metrics, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		registry: reg,
		attempts: f("model_attempts_total",
			"Model attempts by how they ended (model.Outcome: completed, not_sent, overloaded, rejected, cut_idle, cut_total, invalid, overflow, worker_lost, cancelled, unknown, breaker_open).",
			"provider", "model", "outcome"),
		tokens: f("model_tokens_total",
			"Tokens of completed model attempts as the provider reported them, by type (input or output).",
			"provider", "model", "type"),
		retries: f("retries_total",
			"Activity attempts that failed in a way that is tried again — by Temporal's retry policy, or by the turn guard for a model attempt — by activity and reason; the last attempt of a spent budget counts too.",
			"activity", "reason"),
		operations: f("operations_total",
			"Operations (tool calls and deliveries) by the outcome the ledger recorded for them (succeeded, failed, absent, unknown, needs_human), counted at each change of state.",
			"kind", "state"),
		verdicts: f("reconcile_verdicts_total",
			"Verdicts recorded on operations whose outcome was unknown (found, absent, indeterminate), by a reconciler or a person.",
			"kind", "verdict"),
		deliveries: f("deliveries_total",
			"Delivery attempts of a task's final answer by how they ended (succeeded, not_sent, unknown, failed), by target (slack, github_comment).",
			"target", "state"),
		policyDecisions: f("policy_decisions_total",
			"Decisions of the task's policy on tool calls, made before anything is sent (docs/design.md §5.8), by decision (allow, deny, require_approval) and the rule that made it.",
			"decision", "rule"),
		breakerTransitions: f("breaker_transitions_total",
			"Circuit breaker state changes, by breaker key and states.",
			"key", "from", "to"),
	}
	m.breakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "breaker_state",
		Help: "1 for the current state of each circuit breaker (closed, half-open, open), 0 for the others."},
		[]string{"key", "state"})
	reg.MustRegister(m.breakerState,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("bridge the Temporal SDK's metrics to Prometheus: %w", err)
	}
	m.provider = sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}},
		)),
	)
	m.temporal = newCachedHandler(temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: m.provider.Meter("go.temporal.io/sdk"),
		// Counters are monotonic, so Prometheus sees them as counters
		// (temporal_request_total), not gauges.
		UseMonotonicCounters: true,
		OnError: func(err error) {
			logger.Warn("metrics: a Temporal SDK metric could not be recorded", "error", err)
		},
	}))
	return m, nil
}

// TemporalHandler is the client.Options.MetricsHandler that puts the
// Temporal SDK's metrics (temporal_request_total,
// temporal_workflow_endtoend_latency_seconds, …) into this registry,
// keeping each tag set's handler and instrument (cachedHandler). It is the
// SDK's no-op handler on a nil *Metrics.
func (m *Metrics) TemporalHandler() client.MetricsHandler {
	if m == nil {
		return client.MetricsNopHandler
	}
	return m.temporal
}

// Registry is the registry every metric is in.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Close stops the Temporal SDK bridge; metrics recorded after it are lost.
func (m *Metrics) Close(ctx context.Context) error {
	if m == nil {
		return nil
	}
	return m.provider.Shutdown(ctx)
}

// ModelAttempt counts one model attempt that ended with outcome.
func (m *Metrics) ModelAttempt(provider, modelName string, outcome model.Outcome) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(provider, modelName, string(outcome)).Inc()
}

// ModelTokens adds the tokens a completed attempt used.
func (m *Metrics) ModelTokens(provider, modelName string, usage model.Usage) {
	if m == nil {
		return
	}
	if usage.InputTokens > 0 {
		m.tokens.WithLabelValues(provider, modelName, "input").Add(float64(usage.InputTokens))
	}
	if usage.OutputTokens > 0 {
		m.tokens.WithLabelValues(provider, modelName, "output").Add(float64(usage.OutputTokens))
	}
}

// Retry counts one failed attempt of activity that is tried again, and why.
func (m *Metrics) Retry(activity, reason string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(activity, reason).Inc()
}

// OperationSettled counts an operation of kind reaching state in the ledger.
func (m *Metrics) OperationSettled(kind string, state capstan.Outcome) {
	if m == nil {
		return
	}
	m.operations.WithLabelValues(kind, state.String()).Inc()
}

// ReconcileVerdict counts a verdict recorded on an operation of kind.
func (m *Metrics) ReconcileVerdict(kind string, verdict capstan.Verdict) {
	if m == nil {
		return
	}
	m.verdicts.WithLabelValues(kind, verdict.String()).Inc()
}

// Delivery counts a delivery attempt to target that ended in state.
func (m *Metrics) Delivery(target string, state capstan.Outcome) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(target, state.String()).Inc()
}

// PolicyDecision counts one decision of a task's policy on a tool call:
// decision is its effect (allow, deny, require_approval), rule the rule
// that made it.
func (m *Metrics) PolicyDecision(decision, rule string) {
	if m == nil {
		return
	}
	m.policyDecisions.WithLabelValues(decision, rule).Inc()
}

// BreakerTransition records that the breaker key went from one state to
// another (BreakerClosed, BreakerHalfOpen, BreakerOpen; gobreaker's
// State.String()). It fits gobreaker's OnStateChange. An empty from declares
// the breaker's first state: the gauge is set and no transition is counted.
func (m *Metrics) BreakerTransition(key, from, to string) {
	if m == nil {
		return
	}
	if from != "" {
		m.breakerTransitions.WithLabelValues(key, from, to).Inc()
	}
	known := false
	for _, s := range breakerStates {
		v := 0.0
		if s == to {
			v, known = 1, true
		}
		m.breakerState.WithLabelValues(key, s).Set(v)
	}
	if !known {
		m.breakerState.WithLabelValues(key, to).Set(1)
	}
}
