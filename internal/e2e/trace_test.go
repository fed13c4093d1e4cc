package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// jaegerBin is the pinned Jaeger (scripts/jaeger.sh builds it into
// .bin/jaeger and exports CAPSTAN_JAEGER_BIN). Without it the trace test
// skips, and fails under CI=true, where .ci/run installs it.
func jaegerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CAPSTAN_JAEGER_BIN")
	if bin == "" {
		if root, err := filepath.Abs("../.."); err == nil {
			bin = filepath.Join(root, ".bin", "jaeger")
		}
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Jaeger at %q (CAPSTAN_JAEGER_BIN): .ci/run installs it with scripts/jaeger.sh", bin)
		}
		t.Skipf("no Jaeger at %q: `eval \"$(scripts/jaeger.sh)\"` builds it", bin)
	}
	return bin
}

// jaeger is a running Jaeger: all in one process, spans in memory.
type jaeger struct {
	otlp  string // OTLP/HTTP endpoint, for OTEL_EXPORTER_OTLP_ENDPOINT
	query string // base URL of the query service's HTTP API
}

// startJaeger runs Jaeger with OTLP/HTTP and its query API on free
// loopback ports, and waits until it answers. It is stopped at the end
// of the test.
func startJaeger(t *testing.T) jaeger {
	t.Helper()
	bin := jaegerBin(t)
	otlpPort, queryPort, grpcPort, healthPort := freePort(t), freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, healthPort, queryPort, grpcPort, otlpPort)
	file := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", file)
	var out bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout = &syncWriter{mu: &mu, w: &out}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	j := jaeger{otlp: fmt.Sprintf("http://127.0.0.1:%d", otlpPort), query: fmt.Sprintf("http://127.0.0.1:%d", queryPort)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(j.query + "/api/services")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case <-exited:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("Jaeger exited before serving:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("Jaeger's query API did not answer within 60 s:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jaegerSpan is a span as Jaeger's query API (/api/traces) returns it.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

func (s jaegerSpan) tag(key string) string {
	for _, tg := range s.Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// traces asks Jaeger for the traces of service that have a span tagged
// tags (the query API's tags filter, a JSON object).
func (j jaeger) traces(t *testing.T, service string, tags map[string]string) []jaegerTrace {
	t.Helper()
	q := url.Values{"service": {service}, "limit": {"100"}, "lookback": {"1h"}}
	if len(tags) > 0 {
		b, _ := json.Marshal(tags)
		q.Set("tags", string(b))
	}
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	getJaeger(t, j.query+"/api/traces?"+q.Encode(), &out)
	return out.Data
}

// trace reads one trace back whole.
func (j jaeger) trace(t *testing.T, id string) jaegerTrace {
	t.Helper()
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	getJaeger(t, j.query+"/api/traces/"+id, &out)
	if len(out.Data) != 1 {
		t.Fatalf("Jaeger has %d traces of id %s, want 1", len(out.Data), id)
	}
	return out.Data[0]
}

func getJaeger(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// TestLongTraceInJaeger runs the demo task with its pull request behind an
// approval, the worker and the starter exporting their spans to a real
// Jaeger over OTLP, and reads the task's trace back through Jaeger's query
// API. On the way the model's first answer is a 503 (the turn's attempt is
// retried) and the worker that started the task is stopped while the pull
// request awaits approval: another worker, with an empty cache, replays
// the workflow and finishes it. The trace must be one trace from the
// starter's start to the task's end, a tree (every span's parent in it),
// with one workflow span whatever the replay, the retried attempt as a
// span of its own beside the one that completed, a span for each tool call
// with its class, the policy's decision and its outcome, and no attribute
// holding the prompt, a file's content or a token.
func TestLongTraceInJaeger(t *testing.T) {
	requireLong(t)
	j := startJaeger(t)
	sb := startSandbox(t)
	// The first model request of the task is refused with a 503: its turn
	// takes a second attempt.
	if err := sb.Model.AddFault(sandbox.FaultRule{Endpoint: "chat/completions", Kind: sandbox.FaultStatus, Status: 503, Times: 1}); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, "e2e-trace", sb),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+j.otlp,
		"OTEL_BSP_SCHEDULE_DELAY=200")
	first := startWorker(t, env)
	if line := first.stdoutLine("traces: "); line != "traces: OTLP to "+j.otlp {
		t.Errorf("the worker's traces line = %q, want OTLP to %s", line, j.otlp)
	}
	taskID, op := startApprovalTask(t, env, "trace")

	// While the pull request waits, the worker that ran the task so far
	// stops (flushing its spans); another takes the task over, replaying
	// its history from the start.
	first.stop(t, syscall.SIGTERM, 60*time.Second)
	second := startWorker(t, env)
	if r := runStarter(t, env, "approve", taskID, op.OperationID, "--hash", op.CallHash, "--as", "alice"); r.code != 0 {
		t.Fatalf("approve: exit %d, stderr %q", r.code, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s, want completed", taskID, res.Status)
	}
	second.stop(t, syscall.SIGTERM, 60*time.Second) // flushes its spans
	wid := workflows.WorkflowID(taskID)

	// One trace holds the task: every span the worker made for this
	// workflow is in it.
	// Jaeger has it all once two reads a second apart find the same spans.
	var tr jaegerTrace
	last := -1
	deadline := time.Now().Add(30 * time.Second)
	for {
		found := j.traces(t, "capstan-worker", map[string]string{"temporalWorkflowID": wid})
		ids := map[string]bool{}
		for _, x := range found {
			for _, s := range x.Spans {
				if s.tag("temporalWorkflowID") == wid && (strings.HasPrefix(s.OperationName, "RunWorkflow:") ||
					strings.HasPrefix(s.OperationName, "StartActivity:") || strings.HasPrefix(s.OperationName, "RunActivity:")) {
					ids[x.TraceID] = true
				}
			}
		}
		if len(ids) > 1 {
			t.Fatalf("the task's spans are in %d traces, want one: %v", len(ids), ids)
		}
		if len(ids) == 1 {
			for id := range ids {
				tr = j.trace(t, id)
			}
			if hasSpan(tr, "RunWorkflow:"+agentTaskType) && len(tr.Spans) == last {
				break
			}
			last = len(tr.Spans)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger has no trace with the task's workflow span within 30 s (found %d traces)", len(found))
		}
		time.Sleep(time.Second)
	}
	logSpanTree(t, tr)

	byID := map[string]jaegerSpan{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	count := func(pred func(jaegerSpan) bool) int {
		n := 0
		for _, s := range tr.Spans {
			if pred(s) {
				n++
			}
		}
		return n
	}
	named := func(prefix string) []jaegerSpan {
		var out []jaegerSpan
		for _, s := range tr.Spans {
			if strings.HasPrefix(s.OperationName, prefix) {
				out = append(out, s)
			}
		}
		return out
	}
	service := func(s jaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }
	parentName := func(s jaegerSpan) string { return byID[s.parent()].OperationName }

	// The tree: the starter's start is the root; every other span's parent
	// is in the trace, and span ids are unique.
	roots := 0
	seen := map[string]bool{}
	for _, s := range tr.Spans {
		if seen[s.SpanID] {
			t.Errorf("span id %s twice in the trace (%s)", s.SpanID, s.OperationName)
		}
		seen[s.SpanID] = true
		switch p := s.parent(); {
		case p == "":
			roots++
			if s.OperationName != "StartWorkflow:"+agentTaskType || service(s) != "capstan-starter" {
				t.Errorf("root span %s of %s, want the starter's StartWorkflow:%s", s.OperationName, service(s), agentTaskType)
			}
		case byID[p].SpanID == "":
			t.Errorf("span %s has parent %s, which is not in the trace", s.OperationName, p)
		}
	}
	if roots != 1 {
		t.Errorf("the trace has %d roots, want 1", roots)
	}

	// One workflow span, though a second worker replayed the workflow:
	// the activities both workers scheduled hang from it.
	wf := named("RunWorkflow:")
	if len(wf) != 1 {
		t.Fatalf("%d RunWorkflow spans, want 1 (a replay must not add one)", len(wf))
	}
	if parentName(wf[0]) != "StartWorkflow:"+agentTaskType {
		t.Errorf("the workflow span's parent is %q, want the starter's start", parentName(wf[0]))
	}
	for _, s := range named("StartActivity:") {
		if s.parent() != wf[0].SpanID {
			t.Errorf("%s hangs from %q, want the workflow span", s.OperationName, parentName(s))
		}
	}
	for _, s := range named("RunActivity:") {
		if !strings.HasPrefix(parentName(s), "StartActivity:") || strings.TrimPrefix(parentName(s), "StartActivity:") != strings.TrimPrefix(s.OperationName, "RunActivity:") {
			t.Errorf("%s hangs from %q, want its StartActivity", s.OperationName, parentName(s))
		}
	}
	workers := map[string]bool{}
	for _, s := range named("RunActivity:") {
		workers[s.ProcessID] = true
	}
	if len(workers) != 2 {
		t.Errorf("activities ran in %d worker processes, want 2 (before and after the replay)", len(workers))
	}

	// Model attempts: each a "chat demo" span under its ModelTurn, with
	// the GenAI attributes; the 503 is a span of its own, and its turn's
	// next attempt completed.
	chats := named("chat ")
	if len(chats) < 5 {
		t.Errorf("%d model attempt spans, want 5 (4 turns, one retried)", len(chats))
	}
	failed, completed := 0, 0
	for _, s := range chats {
		if parentName(s) != "RunActivity:"+"ModelTurn" {
			t.Errorf("%s hangs from %q, want RunActivity:ModelTurn", s.OperationName, parentName(s))
		}
		if s.tag("gen_ai.provider.name") != "openai" || s.tag("gen_ai.request.model") != "demo" || s.tag("gen_ai.operation.name") != "chat" {
			t.Errorf("model attempt span %s lacks the GenAI request attributes: %v", s.OperationName, s.Tags)
		}
		switch s.tag("capstan.outcome") {
		case "completed":
			completed++
			if s.tag("gen_ai.usage.input_tokens") == "" || s.tag("gen_ai.usage.output_tokens") == "" || s.tag("gen_ai.response.finish_reasons") == "" {
				t.Errorf("completed attempt %s lacks usage or finish reason: %v", s.SpanID, s.Tags)
			}
		case "overloaded":
			failed++
			if s.tag("error.type") != "overloaded" || s.tag("otel.status_code") != "ERROR" {
				t.Errorf("the 503 attempt's span is not an error of type overloaded: %v", s.Tags)
			}
		}
	}
	if failed != 1 || completed != 4 {
		t.Errorf("model attempt spans: %d overloaded, %d completed; want 1 and 4", failed, completed)
	}

	// Tool calls: one span per ExecuteTool, with class, decision, outcome.
	// (A call that only asks the ledger, as the task does before asking
	// a person, decides nothing.)
	outcomes := map[string][]string{}
	tools := named("execute_tool ")
	sort.Slice(tools, func(i, j int) bool { return tools[i].StartTime < tools[j].StartTime })
	for _, s := range tools {
		tool := s.tag("gen_ai.tool.name")
		ledgerOnly := s.tag("capstan.ledger_only") == "true"
		if !ledgerOnly {
			outcomes[tool] = append(outcomes[tool], s.tag("capstan.outcome"))
		}
		if parentName(s) != "RunActivity:ExecuteTool" || s.tag("capstan.operation_id") == "" || s.tag("capstan.tool.class") == "" ||
			(s.tag("capstan.policy.decision") == "" && !ledgerOnly) {
			t.Errorf("tool span %s (parent %q) lacks its operation, class or decision: %v", s.OperationName, parentName(s), s.Tags)
		}
	}
	want := map[string][]string{
		"github_create_branch":       {string(capstan.OutcomeSucceeded)},
		"github_put_file":            {string(capstan.OutcomeSucceeded)},
		"github_create_pull_request": {string(capstan.OutcomeAwaitingApproval), string(capstan.OutcomeSucceeded)},
	}
	for tool, w := range want {
		if got := outcomes[tool]; !slices.Equal(got, w) {
			t.Errorf("%s tool spans' outcomes %v, want %v", tool, got, w)
		}
	}
	// The wait for a person: one span under the workflow's, from the pull
	// request's first call to the approved one, across the replay.
	waits := named("approval_wait")
	if len(waits) != 1 || waits[0].parent() != wf[0].SpanID || waits[0].tag("capstan.approval") != "approved" ||
		waits[0].tag("capstan.approval.by") != "alice" || waits[0].tag("gen_ai.tool.name") != "github_create_pull_request" || waits[0].Duration <= 0 {
		t.Errorf("approval_wait spans = %+v, want one under the workflow span, approved by alice, for the pull request", waits)
	}

	// The outbound HTTP calls are traced (otelhttp), under the attempt or
	// the tool call that made them.
	if n := count(func(s jaegerSpan) bool {
		return s.tag("http.request.method") != "" && (strings.HasPrefix(parentName(s), "chat ") || strings.HasPrefix(parentName(s), "execute_tool "))
	}); n < 8 {
		t.Errorf("%d HTTP client spans under model attempts and tool calls, want at least 8", n)
	}

	// The approval: the starter's update reached the workflow, in the
	// trace the approve command started.
	upd := j.traces(t, "capstan-worker", map[string]string{"temporalWorkflowID": wid})
	handled := 0
	for _, x := range upd {
		for _, s := range x.Spans {
			if s.OperationName == "HandleUpdate:approve" {
				handled++
			}
		}
	}
	if handled != 1 {
		t.Errorf("%d HandleUpdate:approve spans, want 1", handled)
	}

	// No attribute holds the prompt, the file's content or a token.
	secrets := map[string]string{"the prompt": prPrompt, "HELLO.md's content": "This file was written by a durable agent task",
		"the OpenAI key": openAIKey, "the GitHub token": githubTok, "the Slack token": slackToken}
	for _, x := range append([]jaegerTrace{tr}, upd...) {
		for _, s := range x.Spans {
			for _, tg := range s.Tags {
				v := fmt.Sprint(tg.Value)
				for what, secret := range secrets {
					if strings.Contains(v, secret) {
						t.Errorf("span %s attribute %s holds %s: %q", s.OperationName, tg.Key, what, v)
					}
				}
			}
		}
	}
}

func hasSpan(tr jaegerTrace, name string) bool {
	for _, s := range tr.Spans {
		if s.OperationName == name {
			return true
		}
	}
	return false
}

// logSpanTree logs the trace as a tree: each span's name, service, time
// and key attributes, children by start time.
func logSpanTree(t *testing.T, tr jaegerTrace) {
	t.Helper()
	children := map[string][]jaegerSpan{}
	ids := map[string]bool{}
	for _, s := range tr.Spans {
		ids[s.SpanID] = true
	}
	var roots []jaegerSpan
	for _, s := range tr.Spans {
		if p := s.parent(); p != "" && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	keys := []string{"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
		"gen_ai.response.finish_reasons", "gen_ai.tool.name", "capstan.tool.class", "capstan.policy.decision", "capstan.outcome",
		"capstan.approval", "capstan.approval.by", "capstan.ledger_only", "capstan.replayed", "error.type", "http.request.method", "http.response.status_code", "url.path"}
	var b strings.Builder
	var walk func(s jaegerSpan, depth int)
	walk = func(s jaegerSpan, depth int) {
		var attrs []string
		for _, k := range keys {
			if v := s.tag(k); v != "" {
				attrs = append(attrs, strings.TrimPrefix(strings.TrimPrefix(k, "gen_ai."), "capstan.")+"="+v)
			}
		}
		fmt.Fprintf(&b, "%s%s [%s/%s %s] %s\n", strings.Repeat("  ", depth), s.OperationName, tr.Processes[s.ProcessID].ServiceName, s.ProcessID,
			(time.Duration(s.Duration) * time.Microsecond).Round(time.Millisecond), strings.Join(attrs, " "))
		kids := children[s.SpanID]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime < kids[j].StartTime })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	t.Logf("trace %s, %d spans:\n%s", tr.TraceID, len(tr.Spans), b.String())
}

// agentTaskType is the task workflow's type, as the tracing interceptor
// names its spans (RunWorkflow:AgentTask).
const agentTaskType = "AgentTask"
