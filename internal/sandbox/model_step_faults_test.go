package sandbox

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// Step faults, model rules over HTTP, and held requests at shutdown.

// addTestScript makes a script playable on m alone.
func addTestScript(t *testing.T, m *Model, data string) {
	t.Helper()
	if err := m.AddScript([]byte(data)); err != nil {
		t.Fatal(err)
	}
}

// TestModelStepFaults: a step's fault strikes the requests that play that
// step, "times" of them when it is set, in both formats; an endpoint rule
// comes first.
func TestModelStepFaults(t *testing.T) {
	const flaky = `{"name": "flaky", "steps": [
		{"text": "Reading.", "tool_calls": [{"name": "github_get_file", "arguments": {"repo": "a/b", "path": "README.md"}}],
		 "fault": {"kind": "status", "status": 529, "retry_after": "2s", "times": 1}},
		{"text": "Here is a long answer that the token limit cuts.", "fault": {"kind": "max_tokens"}}
	]}`
	for _, wire := range wires {
		t.Run(wire.name, func(t *testing.T) {
			m, srv := newModelServer(t)
			addTestScript(t, m, flaky)
			start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			clock := NewManualClock(start)
			m.SetNow(clock.Now)
			c := testClient(t)
			x := send(t, context.Background(), c, srv.URL+wire.path, wire.body("flaky", 0, 0))
			if x.err != nil || x.resp.StatusCode != statusOverloaded || x.resp.Header.Get("Retry-After") != "2" {
				t.Fatalf("step 1, first play: %v %v, want 529 with Retry-After 2", x.err, x.resp)
			}
			clock.Advance(2 * time.Second)
			x = send(t, context.Background(), c, srv.URL+wire.path, wire.body("flaky", 0, 0))
			if a := decode(t, wire.name, x.events); x.err != nil || !a.done || len(a.tools) != 1 {
				t.Fatalf("step 1, second play: %v %+v, want the tool call", x.err, a)
			}
			for play := range 2 {
				x = send(t, context.Background(), c, srv.URL+wire.path, wire.body("flaky", 1, 0))
				a := decode(t, wire.name, x.events)
				if x.err != nil || a.text != "Here is a long answer " || (a.finish != "length" && a.finish != "max_tokens") {
					t.Fatalf("step 2, play %d: %v %+v, want the cut text every time", play+1, x.err, a)
				}
			}
			// An endpoint rule takes precedence over the step's fault.
			addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultEmpty, Times: 1})
			x = send(t, context.Background(), c, srv.URL+wire.path, wire.body("flaky", 1, 0))
			if a := decode(t, wire.name, x.events); x.err != nil || a.text != "" || !a.done {
				t.Fatalf("under a rule: %v %+v, want the empty answer", x.err, a)
			}
			if st := m.Stats(); st.Requests != 5 || st.Faulted != 4 || st.ScriptRequests["flaky"] != 5 {
				t.Errorf("stats %+v", st)
			}
			later := start.Add(2 * time.Second)
			want := []ModelRequest{
				{At: start, Endpoint: wire.endpoint, Script: "flaky", Step: 0, Fault: FaultStatus},
				{At: later, Endpoint: wire.endpoint, Script: "flaky", Step: 0},
				{At: later, Endpoint: wire.endpoint, Script: "flaky", Step: 1, Fault: FaultMaxTokens},
				{At: later, Endpoint: wire.endpoint, Script: "flaky", Step: 1, Fault: FaultMaxTokens},
				{At: later, Endpoint: wire.endpoint, Script: "flaky", Step: 1, Fault: FaultEmpty},
			}
			if got := m.Requests(); !slices.Equal(got, want) {
				t.Errorf("request log\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestStepFaultValidation(t *testing.T) {
	for _, tt := range []struct{ fault, want string }{
		{`{"kind":"stall","endpoint":"messages"}`, "names no endpoint"},
		{`{"kind":"drop"}`, "unknown kind"},
		{`{"kind":"status"}`, "status must be 400 to 599"},
		{`{"kind":"status","status":429,"after_events":2}`, "after_events is only"},
		{`{"kind":"stall","retry_after":"soon"}`, "invalid duration"},
		{`{"kind":"stall","colour":"red"}`, "unknown field"},
	} {
		_, err := parseScript([]byte(`{"name":"x","steps":[{"text":"hi","fault":` + tt.fault + `}]}`))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("fault %s: %v, want an error about %q", tt.fault, err, tt.want)
		}
	}
}

// TestModelFaultRulesOverHTTP: a model rule set on a running sandbox's
// /_sandbox/faults, with every model field, strikes and is listed as fired.
func TestModelFaultRulesOverHTTP(t *testing.T) {
	sb := startSandbox(t, Options{})
	faults := strings.TrimSuffix(sb.ModelURL, "/v1") + "/_sandbox/faults"
	var added map[string]any
	if code := controlRequest(t, http.MethodPost, faults,
		`{"endpoint":"chat/completions","kind":"status","status":429,"retry_after":"2s","retry_after_ms":"1500ms","times":1}`, &added); code != http.StatusCreated ||
		added["retry_after"] != "2s" || added["retry_after_ms"] != "1.5s" || added["status"] != 429.0 {
		t.Fatalf("POST: %d %v", code, added)
	}
	if code := controlRequest(t, http.MethodPost, faults, `{"endpoint":"messages","kind":"context_overflow","prompt_bytes_over":100}`, &added); code != http.StatusCreated ||
		added["prompt_bytes_over"] != 100.0 {
		t.Fatalf("POST overflow: %d %v", code, added)
	}
	var e struct{ Error string }
	if code := controlRequest(t, http.MethodPost, faults, `{"endpoint":"messages","kind":"stall","after_events":-2}`, &e); code != http.StatusBadRequest ||
		!strings.Contains(e.Error, "must not be negative") {
		t.Errorf("bad rule: %d %q", code, e.Error)
	}
	x := send(t, context.Background(), testClient(t), sb.ModelURL+"/chat/completions", openAIBody("hello", 0, 0))
	if x.err != nil || x.resp.StatusCode != http.StatusTooManyRequests || x.resp.Header.Get("Retry-After") != "2" || x.resp.Header.Get("retry-after-ms") != "1500" {
		t.Fatalf("faulted request: %v %v", x.err, x.resp)
	}
	var listed []map[string]any
	testenv.GetJSON(t, faults, &listed)
	if len(listed) != 2 || listed[0]["fired"] != 1.0 || listed[1]["fired"] != 0.0 {
		t.Errorf("GET: %v", listed)
	}
	var log []ModelRequest
	testenv.GetJSON(t, strings.TrimSuffix(sb.ModelURL, "/v1")+"/_sandbox/requests", &log)
	if len(log) != 1 || log[0].Fault != FaultStatus || log[0].Script != "hello" || log[0].Endpoint != "chat/completions" || log[0].At.IsZero() {
		t.Errorf("GET /_sandbox/requests: %+v", log)
	}
	var st ModelStats
	testenv.GetJSON(t, strings.TrimSuffix(sb.ModelURL, "/v1")+"/_sandbox/stats", &st)
	if st.Requests != 1 || st.OpenAIRequests != 1 || st.Faulted != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestModelHeldRequestsEndWithTheSandbox: Close releases a held request and
// a stalled and an endless stream whose clients are still waiting, and
// returns only once their handlers have.
func TestModelHeldRequestsEndWithTheSandbox(t *testing.T) {
	sb, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	holding := make(chan struct{}, 4)
	sb.Model.SetOnHold(func() { holding <- struct{}{} })
	for _, kind := range []FaultKind{FaultHoldHeaders, FaultStall, FaultEndless} {
		addRule(t, sb.Model, FaultRule{Endpoint: "messages", Kind: kind, Times: 1})
	}
	c := testClient(t)
	ended := make(chan exchange, 3)
	for range 3 {
		go func() {
			ended <- send(t, context.Background(), c, sb.ModelURL+"/messages", anthropicBody("hello", 0, 0))
		}()
	}
	for range 3 {
		waitFor(t, holding, "three held requests")
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if x := waitFor(t, ended, "the clients to see the end"); x.err == nil && x.streamErr == nil {
			t.Errorf("a client saw a clean end: %+v", x)
		}
	}
	waitHeldDone(t, sb.Model)
}

// TestAddScriptKeepsTheEmbeddedOnes: a script added at run time plays on
// its Model alone, and cannot take an embedded script's name.
func TestAddScriptKeepsTheEmbeddedOnes(t *testing.T) {
	m, other := NewModel(), NewModel()
	if err := m.AddScript([]byte(`{"name": "demo", "steps": [{"text": "mine"}]}`)); err == nil {
		t.Fatal("AddScript took the embedded script demo's name")
	}
	if err := m.AddScript([]byte(`{"name": "mine", "steps": [{}]}`)); err == nil {
		t.Fatal("AddScript took an empty step")
	}
	if err := m.AddScript([]byte(`{"name": "mine", "steps": [{"text": "hello"}]}`)); err != nil {
		t.Fatal(err)
	}
	if sc, ok := m.lookupScript("mine"); !ok || sc.Steps[0].Text != "hello" {
		t.Fatalf("lookupScript(mine) = %v, %v", sc, ok)
	}
	if _, ok := other.lookupScript("mine"); ok {
		t.Fatal("a script added to one Model plays on another")
	}
	if _, ok := m.lookupScript("demo"); !ok {
		t.Fatal("the embedded script demo is gone")
	}
}
