package metrics_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/testenv"
)

// serve starts m's endpoint on a free loopback port for the test.
func serve(t *testing.T, m *metrics.Metrics) *metrics.Server {
	t.Helper()
	srv, err := m.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return srv
}

func newMetrics(t *testing.T) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// want asserts one value of a scrape.
func want(t *testing.T, s testenv.Scrape, name string, labels map[string]string, v float64) {
	t.Helper()
	got, ok := s.Value(name, labels)
	if !ok || got != v {
		t.Errorf("%s%v = %v (present %v), want %v\n%s", name, labels, got, ok, v, s.Samples(name))
	}
}

func TestEndpointServesCapstanMetricsWithTheirLabels(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	srv := serve(t, m)

	m.ModelAttempt("openai", "gpt-4.1", model.OutcomeCompleted)
	m.ModelAttempt("openai", "gpt-4.1", model.OutcomeCompleted)
	m.ModelAttempt("openai", "gpt-4.1", model.OutcomeCutIdle)
	m.ModelTokens("openai", "gpt-4.1", model.Usage{InputTokens: 120, OutputTokens: 30})
	m.ModelTokens("openai", "gpt-4.1", model.Usage{InputTokens: 80})
	m.Retry("ExecuteTool", "rate_limited")
	m.OperationSettled("github_create_branch", capstan.OutcomeSucceeded)
	m.OperationSettled("slack_post", capstan.OutcomeUnknown)
	m.ReconcileVerdict("slack_post", capstan.VerdictFound)
	m.Delivery("slack", capstan.OutcomeSucceeded)
	m.PolicyDecision("deny", "default/repository")
	m.PolicyDecision("deny", "default/repository")
	m.PolicyDecision("allow", "default/allow")

	s := testenv.ScrapeMetrics(t, srv.URL())
	want(t, s, "capstan_model_attempts_total", map[string]string{"provider": "openai", "model": "gpt-4.1", "outcome": "completed"}, 2)
	want(t, s, "capstan_model_attempts_total", map[string]string{"outcome": "cut_idle"}, 1)
	want(t, s, "capstan_model_tokens_total", map[string]string{"provider": "openai", "type": "input"}, 200)
	want(t, s, "capstan_model_tokens_total", map[string]string{"type": "output"}, 30)
	want(t, s, "capstan_retries_total", map[string]string{"activity": "ExecuteTool", "reason": "rate_limited"}, 1)
	want(t, s, "capstan_operations_total", map[string]string{"kind": "github_create_branch", "state": "succeeded"}, 1)
	want(t, s, "capstan_operations_total", map[string]string{"kind": "slack_post", "state": "unknown"}, 1)
	want(t, s, "capstan_reconcile_verdicts_total", map[string]string{"kind": "slack_post", "verdict": "found"}, 1)
	want(t, s, "capstan_deliveries_total", map[string]string{"target": "slack", "state": "succeeded"}, 1)
	want(t, s, "capstan_policy_decisions_total", map[string]string{"decision": "deny", "rule": "default/repository"}, 2)
	want(t, s, "capstan_policy_decisions_total", map[string]string{"decision": "allow", "rule": "default/allow"}, 1)
	if _, ok := s.Value("go_goroutines", nil); !ok {
		t.Error("the Go runtime's metrics are not served")
	}
}

// The breaker engineer's hook: gobreaker's OnStateChange calls
// BreakerTransition(name, from.String(), to.String()).
func TestBreakerStateAndTransitions(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	srv := serve(t, m)
	key := map[string]string{"key": "github/write"}
	with := func(kv ...string) map[string]string {
		out := map[string]string{"key": "github/write"}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	m.BreakerTransition("github/write", "", metrics.BreakerClosed) // declared, not a transition
	s := testenv.ScrapeMetrics(t, srv.URL())
	want(t, s, "capstan_breaker_state", with("state", "closed"), 1)
	want(t, s, "capstan_breaker_state", with("state", "open"), 0)
	if v, ok := s.Value("capstan_breaker_transitions_total", key); ok {
		t.Errorf("declaring a breaker counted %v transitions", v)
	}

	m.BreakerTransition("github/write", metrics.BreakerClosed, metrics.BreakerOpen)
	s = testenv.ScrapeMetrics(t, srv.URL())
	want(t, s, "capstan_breaker_state", with("state", "open"), 1)
	want(t, s, "capstan_breaker_state", with("state", "closed"), 0)
	want(t, s, "capstan_breaker_state", with("state", "half-open"), 0)

	m.BreakerTransition("github/write", metrics.BreakerOpen, metrics.BreakerHalfOpen)
	m.BreakerTransition("github/write", metrics.BreakerHalfOpen, metrics.BreakerOpen)
	m.BreakerTransition("github/write", metrics.BreakerOpen, metrics.BreakerHalfOpen)
	m.BreakerTransition("github/write", metrics.BreakerHalfOpen, metrics.BreakerClosed)
	m.BreakerTransition("slack/post", metrics.BreakerClosed, metrics.BreakerOpen)
	s = testenv.ScrapeMetrics(t, srv.URL())
	want(t, s, "capstan_breaker_state", with("state", "closed"), 1)
	want(t, s, "capstan_breaker_state", with("state", "open"), 0)
	want(t, s, "capstan_breaker_transitions_total", with("from", "closed", "to", "open"), 1)
	want(t, s, "capstan_breaker_transitions_total", with("from", "open", "to", "half-open"), 2)
	want(t, s, "capstan_breaker_transitions_total", with("from", "half-open", "to", "open"), 1)
	want(t, s, "capstan_breaker_transitions_total", with("from", "half-open", "to", "closed"), 1)
	want(t, s, "capstan_breaker_transitions_total", key, 5)
	want(t, s, "capstan_breaker_state", map[string]string{"key": "slack/post", "state": "open"}, 1)
}

// The Temporal SDK's metrics go through the OpenTelemetry bridge into the
// same registry, under Prometheus names: counters with _total, timers as
// histograms in seconds with buckets that fit task latencies.
func TestTemporalSDKMetricsShareTheEndpoint(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	srv := serve(t, m)
	h := m.TemporalHandler().WithTags(map[string]string{"namespace": "default", "workflow_type": "AgentTask"})
	h.Counter("temporal_workflow_completed").Inc(1)
	h.Counter("temporal_workflow_completed").Inc(2)
	h.Timer("temporal_workflow_endtoend_latency").Record(1500 * time.Millisecond)
	h.Timer("temporal_workflow_endtoend_latency").Record(45 * time.Second)
	m.ModelAttempt("sandbox", "review", model.OutcomeCompleted)

	s := testenv.ScrapeMetrics(t, srv.URL())
	wf := map[string]string{"namespace": "default", "workflow_type": "AgentTask"}
	want(t, s, "temporal_workflow_completed_total", wf, 3)
	want(t, s, "temporal_workflow_endtoend_latency_seconds", wf, 2)
	want(t, s, "capstan_model_attempts_total", map[string]string{"provider": "sandbox"}, 1)

	// Buckets in seconds: 1.5 s falls under 2.5, 45 s only under 60.
	fam := s["temporal_workflow_endtoend_latency_seconds"]
	buckets := map[float64]uint64{}
	for _, b := range fam.GetMetric()[0].GetHistogram().GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if buckets[1] != 0 || buckets[2.5] != 1 || buckets[30] != 1 || buckets[60] != 2 {
		t.Errorf("latency buckets = %v, want 1.5 s in (1, 2.5] and 45 s in (30, 60]", buckets)
	}
}

func TestServeOnATakenAddressFailsAtOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	m := newMetrics(t)
	defer m.Close(context.Background())
	if srv, err := m.Serve(ln.Addr().String(), nil); err == nil {
		srv.Close(context.Background())
		t.Fatalf("Serve on the taken %s succeeded", ln.Addr())
	} else if !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("error %q does not name the address", err)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.ModelAttempt("openai", "gpt-4.1", model.OutcomeCompleted)
	m.ModelTokens("openai", "gpt-4.1", model.Usage{InputTokens: 1})
	m.Retry("ModelTurn", "overloaded")
	m.OperationSettled("slack_post", capstan.OutcomeSucceeded)
	m.ReconcileVerdict("slack_post", capstan.VerdictAbsent)
	m.Delivery("slack", capstan.OutcomeSucceeded)
	m.BreakerTransition("slack/post", "closed", "open")
	m.TemporalHandler().Counter("temporal_request").Inc(1)
	if err := m.Close(context.Background()); err != nil {
		t.Error(err)
	}
}

// The provisioned Grafana dashboard reads capstan metrics that exist, under
// the names and labels this package gives them, and shows what the issue
// asks of it: breakers, attempts, operations and task latency. (Its Temporal
// SDK metrics are checked against a real worker in internal/e2e.)
func TestDashboardReadsCapstanMetrics(t *testing.T) {
	t.Parallel()
	m := newMetrics(t)
	m.ModelAttempt("openai", "gpt-4.1", model.OutcomeCompleted)
	m.ModelTokens("openai", "gpt-4.1", model.Usage{InputTokens: 1, OutputTokens: 1})
	m.Retry("ModelTurn", "overloaded")
	m.OperationSettled("slack_post", capstan.OutcomeSucceeded)
	m.ReconcileVerdict("slack_post", capstan.VerdictFound)
	m.Delivery("slack", capstan.OutcomeSucceeded)
	m.BreakerTransition("slack/post", metrics.BreakerClosed, metrics.BreakerOpen)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range fams {
		served[f.GetName()] = true
	}
	read := map[string]bool{}
	for _, name := range testenv.DashboardMetrics(t, testenv.DashboardPath) {
		read[name] = true
		if strings.HasPrefix(name, metrics.Namespace+"_") && !served[name] {
			t.Errorf("the dashboard reads %s, which the worker does not export", name)
		}
	}
	for _, name := range []string{"capstan_breaker_state", "capstan_breaker_transitions_total", "capstan_model_attempts_total",
		"capstan_retries_total", "capstan_operations_total", "capstan_deliveries_total", "temporal_workflow_endtoend_latency_seconds"} {
		if !read[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}
