package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// metricsURL is where the worker serves its metrics, as it printed it.
func (w *workerProcess) metricsURL(t *testing.T) string {
	t.Helper()
	line := w.stdoutLine("metrics: ")
	if line == "" {
		t.Fatalf("the worker printed no metrics URL:\n%s", w.logs())
	}
	return strings.TrimPrefix(line, "metrics: ")
}

// jsonLogLines are the worker's JSON log lines, decoded.
func (w *workerProcess) jsonLogLines(t *testing.T) []map[string]any {
	t.Helper()
	w.mu.Lock()
	text := w.stderr.String()
	w.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestWorkerServesMetricsAndLogsIDs runs the demo task on a real worker
// binary whose model is overloaded once and whose Slack rate-limits the
// first post, then scrapes the worker's /metrics over HTTP: capstan's
// counters have the values the task's result implies, and the Temporal
// SDK's own metrics are in the same endpoint. The worker's log lines carry
// the ids of the task, turn, attempt and operation they are about, and the
// task's static summary is its repository and the first line of its prompt.
func TestWorkerServesMetricsAndLogsIDs(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var modelCalls atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if modelCalls.Add(1) != 1 {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("retry-after-ms", "20")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"The server is overloaded.","type":"server_error"}}`))
		return true
	})
	if err := sb.Slack.AddFault(sandbox.FaultRule{Endpoint: "chat.postMessage", Kind: sandbox.FaultRateLimit, Times: 1, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	env := endpointEnv(t, "e2e-metrics", sb)
	w := startWorker(t, env, "--log-level", "debug")
	url := w.metricsURL(t)

	id := fmt.Sprintf("e2e-metrics-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Add a greeting and open a pull request.\nKeep it short; say hello.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--slack", "#capstan-e2e", "--id", id, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 3 || len(res.Deliveries) != 1 {
		t.Fatalf("result = %+v, want completed with 3 operations and 1 delivery", res)
	}
	attempts, attemptIDs := 0, map[string]bool{}
	for _, turn := range res.Turns {
		for _, a := range turn.Attempts {
			attempts++
			attemptIDs[a.AttemptID] = true
		}
	}
	if first := res.Turns[0].Attempts[0]; first.Outcome != "overloaded" || attempts != len(res.Turns)+1 {
		t.Fatalf("turns = %+v, want one overloaded attempt, then one completed attempt per turn", res.Turns)
	}

	// The SDK records a workflow's completion as it completes it, which
	// the starter may see first: wait for it, then read everything.
	wf := map[string]string{"workflow_type": "AgentTask", "task_queue": "e2e-metrics"}
	s := waitForMetric(t, url, "temporal_workflow_completed_total", wf, 1)
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if got, ok := s.Value(name, labels); !ok || got != want {
			t.Errorf("%s%v = %v (present %v), want %v\n%s", name, labels, got, ok, want, s.Samples(name))
		}
	}
	for _, kind := range []string{"github_create_branch", "github_put_file", "github_create_pull_request"} {
		check("capstan_operations_total", map[string]string{"kind": kind, "state": "succeeded"}, 1)
		check("capstan_operations_total", map[string]string{"kind": kind}, 1)
	}
	check("capstan_operations_total", map[string]string{"kind": "slack_post", "state": "absent"}, 1)
	check("capstan_operations_total", map[string]string{"kind": "slack_post", "state": "succeeded"}, 1)
	check("capstan_operations_total", map[string]string{"state": "succeeded"}, 4) // 3 tool calls and the delivery
	check("capstan_operations_total", nil, 5)

	check("capstan_model_attempts_total", map[string]string{"provider": "openai", "model": "demo", "outcome": "overloaded"}, 1)
	check("capstan_model_attempts_total", map[string]string{"provider": "openai", "model": "demo", "outcome": "completed"}, float64(len(res.Turns)))
	check("capstan_model_attempts_total", nil, float64(attempts))
	for _, typ := range []string{"input", "output"} {
		if v, ok := s.Value("capstan_model_tokens_total", map[string]string{"provider": "openai", "model": "demo", "type": typ}); !ok || v < float64(len(res.Turns)) {
			t.Errorf("%s tokens = %v (present %v), want at least one per turn\n%s", typ, v, ok, s.Samples("capstan_model_tokens_total"))
		}
	}

	check("capstan_retries_total", map[string]string{"activity": "ModelTurn", "reason": "overloaded"}, 1)
	check("capstan_retries_total", map[string]string{"activity": "Deliver", "reason": "rate_limited"}, 1)
	check("capstan_retries_total", nil, 2)
	check("capstan_deliveries_total", map[string]string{"target": "slack", "state": "not_sent"}, 1)
	check("capstan_deliveries_total", map[string]string{"target": "slack", "state": "succeeded"}, 1)
	if _, ok := s.Value("capstan_reconcile_verdicts_total", nil); ok {
		t.Errorf("reconcile verdicts counted with nothing to reconcile:\n%s", s.Samples("capstan_reconcile_verdicts_total"))
	}

	// The Temporal SDK's worker metrics, in the same endpoint.
	check("temporal_workflow_endtoend_latency_seconds", wf, 1)
	if v, ok := s.Value("temporal_request_total", nil); !ok || v < 1 {
		t.Errorf("temporal_request_total = %v (present %v), want the client's requests counted", v, ok)
	}
	if v, ok := s.Value("temporal_activity_execution_latency_seconds", map[string]string{"activity_type": "ExecuteTool"}); !ok || v < 3 {
		t.Errorf("ExecuteTool executions = %v (present %v), want at least 3\n%s", v, ok, s.Samples("temporal_activity_execution_latency_seconds"))
	}

	// The provisioned Grafana dashboard reads SDK and process metrics the
	// worker really exports (its capstan metrics: internal/metrics).
	for _, name := range testenv.DashboardMetrics(t, testenv.DashboardPath) {
		if !strings.HasPrefix(name, "capstan_") && s[name] == nil {
			t.Errorf("the dashboard reads %s, which the worker does not export", name)
		}
	}

	// Log lines carry the ids of what they are about.
	ops := map[string]bool{res.Deliveries[0].OperationID: true}
	for _, op := range res.Operations {
		ops[op.OperationID] = true
	}
	var settled, starting, failed int
	// A turn id is the task's, its chain scope, then the turn (workflows.turnID).
	turnIDRe := regexp.MustCompile("^" + regexp.QuoteMeta(res.TaskID) + "/~[0-9a-f]{12}/t[0-9]+$")
	for _, l := range w.jsonLogLines(t) {
		str := func(k string) string { v, _ := l[k].(string); return v }
		if str("operation_id") != "" && str("task_id") == "" {
			t.Errorf("a line names an operation but not its task: %v", l)
		}
		if str("attempt_id") != "" && (str("turn_id") == "" || str("task_id") == "") {
			t.Errorf("a line names an attempt but not its turn and task: %v", l)
		}
		switch str("msg") {
		case "operation settled":
			settled++
			if str("task_id") != res.TaskID || !ops[str("operation_id")] {
				t.Errorf("operation settled line = %v, want task %s and one of its operations", l, res.TaskID)
			}
			if str("kind") != "slack_post" && !turnIDRe.MatchString(str("turn_id")) {
				t.Errorf("a tool operation's line has turn_id %q: %v", str("turn_id"), l)
			}
		case "openai: attempt starting":
			starting++
			if str("task_id") != res.TaskID || !attemptIDs[str("attempt_id")] || !strings.HasPrefix(str("attempt_id"), str("turn_id")+"/a") {
				t.Errorf("attempt starting line = %v, want the task, turn and attempt of one of its attempts", l)
			}
		case "model attempt failed":
			failed++
			if str("attempt_id") != res.Turns[0].Attempts[0].AttemptID || str("outcome") != "overloaded" {
				t.Errorf("model attempt failed line = %v, want the overloaded first attempt", l)
			}
		}
	}
	if settled != 5 || starting != attempts || failed != 1 {
		t.Errorf("%d operation settled lines (want 5), %d attempt starting (want %d), %d model attempt failed (want 1)",
			settled, starting, attempts, failed)
	}

	// The task's static summary: its repository and its prompt's first line.
	desc, err := describe(context.Background(), res.WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	var summary string
	if err := converter.GetDefaultDataConverter().FromPayload(desc.GetExecutionConfig().GetUserMetadata().GetSummary(), &summary); err != nil {
		t.Fatal(err)
	}
	if want := "capstan-sandbox/demo · Add a greeting and open a pull request."; summary != want {
		t.Errorf("static summary = %q, want %q", summary, want)
	}
}

// waitForMetric scrapes url until name with labels reaches want, and
// returns that scrape; it fails the test after 30 s.
func waitForMetric(t *testing.T, url, name string, labels map[string]string, want float64) testenv.Scrape {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s := testenv.ScrapeMetrics(t, url)
		if v, ok := s.Value(name, labels); ok && v >= want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v did not reach %v within 30 s\n%s", name, labels, want, s.Samples(name))
		}
		<-tick.C
	}
}

// TestWorkerMetricsAddress: an address the worker cannot listen on is one
// sentence naming CAPSTAN_METRICS_ADDR and exit 1; an empty one serves no
// metrics.
func TestWorkerMetricsAddress(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cases := []struct {
		name, addr, want string
	}{
		{"not host:port", "9464", `CAPSTAN_METRICS_ADDR="9464" is not host:port`},
		{"port taken", taken.Addr().String(), fmt.Sprintf(`serve metrics on CAPSTAN_METRICS_ADDR=%q: listen tcp %s: bind: address already in use`, taken.Addr(), taken.Addr())},
		{"unknown host", "no-such-host.invalid:9464", `serve metrics on CAPSTAN_METRICS_ADDR="no-such-host.invalid:9464"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runWorkerToExit(t, append(baseEnv(t, "e2e-metrics-addr"), "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_METRICS_ADDR="+tc.addr))
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 mentioning %q", r.code, r.stderr, tc.want)
			}
			if last := strings.TrimSpace(lastLines(r.stderr)); strings.Count(last, "\n") != 0 || !strings.HasPrefix(last, "worker: ") {
				t.Errorf("stderr does not end with one line of error: %q", r.stderr)
			}
		})
	}

	t.Run("empty turns it off", func(t *testing.T) {
		w := startWorker(t, append(baseEnv(t, "e2e-metrics-off"), "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_METRICS_ADDR="))
		if line := w.stdoutLine("metrics: "); line != "" {
			t.Errorf("the worker serves metrics with CAPSTAN_METRICS_ADDR empty: %q", line)
		}
		if !strings.Contains(w.logs(), "metrics are off") {
			t.Errorf("the worker did not log that metrics are off:\n%s", w.logs())
		}
	})
}

// TestBreakerMetricsFollowTheBreaker: a worker's /metrics shows each of its
// breakers from the start (closed), then github/write open while GitHub
// answers 503 to every write, and closed again after the probe once GitHub
// is back — the same transitions the worker logs — with the waits counted
// as retries for breaker_open.
func TestBreakerMetricsFollowTheBreaker(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	for _, ep := range githubWrites {
		if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: ep, Kind: sandbox.FaultFail, Status: http.StatusServiceUnavailable}); err != nil {
			t.Fatal(err)
		}
	}
	env := append(endpointEnv(t, "e2e-breaker-metrics", sb), "CAPSTAN_RECONCILE_WINDOW=1s",
		"CAPSTAN_BREAKER_FAILURES=2", "CAPSTAN_BREAKER_OPEN=4s")
	w := startWorker(t, env)
	url := w.metricsURL(t)
	state := func(s testenv.Scrape, key, st string) float64 {
		v, _ := s.Value("capstan_breaker_state", map[string]string{"key": key, "state": st})
		return v
	}

	s := testenv.ScrapeMetrics(t, url)
	for _, key := range []string{"github/read", "github/write", "slack/post", "ledger", "model/openai"} {
		if state(s, key, "closed") != 1 || state(s, key, "open") != 0 || state(s, key, "half-open") != 0 {
			t.Errorf("before any call, breaker %s is not shown closed:\n%s", key, s.Samples("capstan_breaker_state"))
		}
	}

	taskID := fmt.Sprintf("e2e-breaker-metrics-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	write := map[string]string{"key": "github/write", "state": "open"}
	s = waitForMetric(t, url, "capstan_breaker_state", write, 1)
	if state(s, "github/write", "closed") != 0 {
		t.Errorf("github/write open and closed at once:\n%s", s.Samples("capstan_breaker_state"))
	}
	sb.GitHub.ClearFaults() // GitHub is back: the probe will close the breaker

	if res := waitResult(t, taskID); res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	s = testenv.ScrapeMetrics(t, url)
	if state(s, "github/write", "closed") != 1 || state(s, "github/write", "open") != 0 || state(s, "github/write", "half-open") != 0 {
		t.Errorf("after the task, github/write is not shown closed:\n%s", s.Samples("capstan_breaker_state"))
	}
	logged := breakerTransitions(t, w, "github/write")
	if len(logged) != 3 {
		t.Fatalf("the worker logged github/write transitions %+v, want closed→open→half-open→closed", logged)
	}
	for _, tr := range logged {
		if v, _ := s.Value("capstan_breaker_transitions_total", map[string]string{"key": "github/write", "from": tr.from, "to": tr.to}); v != 1 {
			t.Errorf("transition %s→%s counted %v times, want 1\n%s", tr.from, tr.to, v, s.Samples("capstan_breaker_transitions_total"))
		}
	}
	if v, _ := s.Value("capstan_breaker_transitions_total", map[string]string{"key": "github/write"}); v != 3 {
		t.Errorf("github/write transitions = %v, want 3\n%s", v, s.Samples("capstan_breaker_transitions_total"))
	}
	if v, ok := s.Value("capstan_retries_total", map[string]string{"reason": "breaker_open"}); !ok || v < 1 {
		t.Errorf("no wait for the open breaker counted as a retry:\n%s", s.Samples("capstan_retries_total"))
	}
}
