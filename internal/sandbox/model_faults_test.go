package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Every model fault, in both wire formats, over loopback: what the client
// gets, byte for byte where it matters, and what the fake counted.

// demoStep0 is the demo script's first step as the fake plays it for the
// test system message.
var demoStep0 = scriptsByName["demo"].Steps[0].expand("t-7")

// liveStream is a stream being read as it arrives.
type liveStream struct {
	resp   *http.Response
	events chan sseEvent // closed when the body ends
	ended  chan error    // what ended it
}

// openStream posts body and returns once the headers arrived.
func openStream(t *testing.T, ctx context.Context, c *http.Client, url string, body []byte) *liveStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %s %q, want a 200 event stream", resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &liveStream{resp: resp, events: make(chan sseEvent, 4096), ended: make(chan error, 1)}
	go func() {
		defer resp.Body.Close()
		err := readEvents(resp.Body, s.events)
		close(s.events)
		s.ended <- err
	}()
	return s
}

// next returns the next n events.
func (s *liveStream) next(t *testing.T, n int) []sseEvent {
	t.Helper()
	out := make([]sseEvent, 0, n)
	for range n {
		ev, ok := <-s.events
		if !ok {
			t.Fatalf("the stream ended after %d of %d events", len(out), n)
		}
		out = append(out, ev)
	}
	return out
}

// rest waits for the stream to end and returns the events left and the error.
func (s *liveStream) rest(t *testing.T) ([]sseEvent, error) {
	t.Helper()
	err := waitFor(t, s.ended, "the stream to end")
	var out []sseEvent
	for ev := range s.events {
		out = append(out, ev)
	}
	return out, err
}

func addRule(t *testing.T, m *Model, rule FaultRule) {
	t.Helper()
	if err := m.AddFault(rule); err != nil {
		t.Fatal(err)
	}
}

// normalEvents is how many events the healthy answer to body has, and how
// many come before its closing ones.
func normalEvents(t *testing.T, wire wireCase, body []byte) (all, beforeClosing int) {
	t.Helper()
	_, srv := newModelServer(t)
	x := send(t, context.Background(), testClient(t), srv.URL+wire.path, body)
	if x.err != nil || x.streamErr != nil {
		t.Fatal(x.err, x.streamErr)
	}
	closing := 2 // message_delta, message_stop
	if wire.name == "openai" {
		closing = 3 // finish, usage, [DONE]
	}
	return len(x.events), len(x.events) - closing
}

func TestModelFaultStatus(t *testing.T) {
	for _, wire := range wires {
		for _, tt := range []struct {
			rule                 FaultRule
			retryAfter, retryMS  string
			openAIType, anthType string
		}{
			{FaultRule{Status: 429, RetryAfter: 2 * time.Second}, "2", "", "requests", "rate_limit_error"},
			{FaultRule{Status: 529, RetryAfterMsHeader: 1500 * time.Millisecond}, "", "1500", "server_error", "overloaded_error"},
			{FaultRule{Status: 503, RetryAfter: 1500 * time.Millisecond, RetryAfterMsHeader: 1500 * time.Millisecond}, "2", "1500", "server_error", "overloaded_error"},
			{FaultRule{Status: 500}, "", "", "server_error", "api_error"},
		} {
			t.Run(wire.name+"/"+http.StatusText(tt.rule.Status), func(t *testing.T) {
				m, srv := newModelServer(t)
				rule := tt.rule
				rule.Endpoint, rule.Kind, rule.Times = wire.endpoint, FaultStatus, 1
				addRule(t, m, rule)
				c := testClient(t)
				x := send(t, context.Background(), c, srv.URL+wire.path, wire.body("hello", 0, 0))
				if x.err != nil || x.resp.StatusCode != tt.rule.Status {
					t.Fatalf("got %v %v, want %d", x.err, x.resp, tt.rule.Status)
				}
				if got := x.resp.Header.Get("Retry-After"); got != tt.retryAfter {
					t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
				}
				if got := x.resp.Header.Get("retry-after-ms"); got != tt.retryMS {
					t.Errorf("retry-after-ms = %q, want %q", got, tt.retryMS)
				}
				typ, _, msg := errorBody(t, wire.name, x.body)
				want := tt.openAIType
				if wire.name == "anthropic" {
					want = tt.anthType
				}
				if typ != want || msg == "" {
					t.Errorf("error type %q message %q, want %q", typ, msg, want)
				}
				// Times 1: the next request is served.
				y := send(t, context.Background(), c, srv.URL+wire.path, wire.body("hello", 0, 0))
				if y.err != nil || y.streamErr != nil || !decode(t, wire.name, y.events).done {
					t.Fatalf("second request: %v %v", y.err, y.streamErr)
				}
				st := m.Stats()
				if st.Requests != 2 || st.Faulted != 1 || st.StreamsCompleted != 1 || m.Faults()[0].Fired != 1 {
					t.Errorf("stats %+v, rules %+v; want 2 requests, 1 faulted, fired once", st, m.Faults())
				}
			})
		}
	}
}

func TestModelFaultResetConnection(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire.name, func(t *testing.T) {
			m, srv := newModelServer(t)
			addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultResetConnection, Times: 1})
			c := testClient(t)
			x := send(t, context.Background(), c, srv.URL+wire.path, wire.body("hello", 0, 0))
			// SENT_NO_HEADERS: the request went out whole, no byte came back.
			if x.err == nil || x.resp != nil || !x.wrote || x.firstByte {
				t.Fatalf("err %v, resp %v, wrote %v, first byte %v; want an error after a written request and no answer",
					x.err, x.resp, x.wrote, x.firstByte)
			}
			if y := send(t, context.Background(), c, srv.URL+wire.path, wire.body("hello", 0, 0)); y.err != nil || !decode(t, wire.name, y.events).done {
				t.Fatalf("second request: %v", y.err)
			}
			if st := m.Stats(); st.Requests != 2 || st.Faulted != 1 || st.StreamsCompleted != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestModelFaultHoldHeaders(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire.name, func(t *testing.T) {
			m, srv, holding := newWireServer(t)
			addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultHoldHeaders})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan exchange, 1)
			go func() { done <- send(t, ctx, testClient(t), srv.URL+wire.path, wire.body("hello", 0, 0)) }()
			waitFor(t, holding, "the request to be held")
			cancel() // the client gives up
			x := waitFor(t, done, "the client to return")
			if !errors.Is(x.err, context.Canceled) || x.resp != nil || !x.wrote || x.firstByte {
				t.Fatalf("err %v, resp %v, wrote %v, first byte %v; want a cancelled request that saw no byte", x.err, x.resp, x.wrote, x.firstByte)
			}
			waitHeldDone(t, m)
			if st := m.Stats(); st.Requests != 1 || st.Faulted != 1 || st.StreamsCompleted != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestModelFaultStall(t *testing.T) {
	for _, wire := range wires {
		body := wire.body("demo", 0, 0)
		_, beforeEnd := normalEvents(t, wire, body)
		for _, after := range []int{0, 3, 1000} {
			t.Run(wire.name+"/"+map[int]string{0: "headers only", 3: "after 3", 1000: "before the end"}[after], func(t *testing.T) {
				m, srv, holding := newWireServer(t)
				addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultStall, AfterEvents: after})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				s := openStream(t, ctx, testClient(t), srv.URL+wire.path, body)
				want := min(after, beforeEnd)
				got := s.next(t, want)
				waitFor(t, holding, "the stall")
				cancel()
				more, err := s.rest(t)
				if len(more) != 0 || err == nil {
					t.Fatalf("after the stall: %d more events, end %v; want none and a broken body", len(more), err)
				}
				a := decode(t, wire.name, got)
				if a.done || a.finish != "" || a.errTyp != "" {
					t.Errorf("a stalled answer finished: %+v", a)
				}
				if after == 1000 && (len(a.tools) != 1 || a.tools[0].args != string(demoStep0.ToolCalls[0].Arguments)) {
					t.Errorf("stalled before the end: tools %+v, want the whole call", a.tools)
				}
				waitHeldDone(t, m)
				if st := m.Stats(); st.Requests != 1 || st.Faulted != 1 || st.StreamsCompleted != 0 {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

func TestModelFaultEndless(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire.name, func(t *testing.T) {
			m, srv := newModelServer(t)
			addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultEndless, Times: 1})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := openStream(t, ctx, testClient(t), srv.URL+wire.path, wire.body("hello", 0, 0))
			events := s.next(t, 40) // 2 s of text at least: more than any step has
			a := decode(t, wire.name, events)
			if a.done || a.finish != "" || !strings.HasPrefix(a.text, endlessWord+endlessWord) {
				t.Fatalf("endless answer %+v", a)
			}
			cancel()
			if _, err := s.rest(t); err == nil {
				t.Error("the stream ended cleanly; want it cut by the client")
			}
			waitHeldDone(t, m)
			if st := m.Stats(); st.Requests != 1 || st.Faulted != 1 || st.StreamsCompleted != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestModelFaultErrorEvents(t *testing.T) {
	for _, wire := range wires {
		for _, tt := range []struct {
			kind             FaultKind
			openAI, anthropc string
		}{
			{FaultOverloadedEvent, "server_error", "overloaded_error"},
			{FaultRateLimitEvent, "rate_limit_exceeded", "rate_limit_error"},
		} {
			t.Run(wire.name+"/"+string(tt.kind), func(t *testing.T) {
				m, srv := newModelServer(t)
				addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: tt.kind, AfterEvents: 4, Times: 1})
				x := send(t, context.Background(), testClient(t), srv.URL+wire.path, wire.body("demo", 0, 0))
				if x.err != nil || x.resp.StatusCode != http.StatusOK || x.streamErr != nil {
					t.Fatalf("%v %v %v", x.err, x.resp, x.streamErr)
				}
				a := decode(t, wire.name, x.events)
				want := tt.openAI
				if wire.name == "anthropic" {
					want = tt.anthropc
					if x.events[4].event != "error" {
						t.Errorf("event 5 is %q, want error", x.events[4].event)
					}
				}
				if a.events != 5 || a.errTyp != want || a.done {
					t.Errorf("answer %+v, want 4 events then a %s error", a, want)
				}
				if wire.name == "openai" && !strings.HasPrefix(a.text, "I'll ") {
					t.Errorf("partial text %q", a.text)
				}
				if st := m.Stats(); st.Requests != 1 || st.Faulted != 1 || st.StreamsCompleted != 0 {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

func TestModelFaultsThatFinish(t *testing.T) {
	truncated := string(demoStep0.ToolCalls[0].Arguments)
	truncated = truncated[:len(truncated)-1]
	for _, wire := range wires {
		natural := map[bool]string{false: "stop", true: "tool_calls"}
		length := "length"
		if wire.name == "anthropic" {
			natural, length = map[bool]string{false: "end_turn", true: "tool_use"}, "max_tokens"
		}
		for _, tt := range []struct {
			kind   FaultKind
			model  string
			text   string
			tools  []toolCallSeen
			finish string
		}{
			{FaultEmpty, "demo", "", nil, natural[false]},
			{FaultMalformedArguments, "demo", demoStep0.Text, []toolCallSeen{{"github_create_branch", truncated}}, natural[true]},
			{FaultMalformedArguments, "hello", scriptsByName["hello"].Steps[0].Text,
				[]toolCallSeen{{"github_get_file", turnsArguments[:len(turnsArguments)-1]}}, natural[true]},
			{FaultUnknownTool, "demo", demoStep0.Text, []toolCallSeen{{UnknownToolName, string(demoStep0.ToolCalls[0].Arguments)}}, natural[true]},
			{FaultUnknownTool, "hello", scriptsByName["hello"].Steps[0].Text, []toolCallSeen{{UnknownToolName, "{}"}}, natural[true]},
			{FaultMaxTokens, "demo", "I'll make a ", nil, length},
		} {
			t.Run(wire.name+"/"+string(tt.kind)+"/"+tt.model, func(t *testing.T) {
				m, srv := newModelServer(t)
				addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: tt.kind, Times: 1})
				x := send(t, context.Background(), testClient(t), srv.URL+wire.path, wire.body(tt.model, 0, 0))
				if x.err != nil || x.streamErr != nil {
					t.Fatalf("%v %v", x.err, x.streamErr)
				}
				a := decode(t, wire.name, x.events)
				if !a.done || a.text != tt.text || a.finish != tt.finish || len(a.tools) != len(tt.tools) {
					t.Fatalf("answer %+v, want text %q, %d tools, finish %s", a, tt.text, len(tt.tools), tt.finish)
				}
				for i, want := range tt.tools {
					if a.tools[i] != want {
						t.Errorf("tool %d = %+v, want %+v", i, a.tools[i], want)
					}
				}
				if tt.kind == FaultMalformedArguments && json.Valid([]byte(a.tools[0].args)) {
					t.Errorf("arguments %s are valid JSON", a.tools[0].args)
				}
				if st := m.Stats(); st.Requests != 1 || st.Faulted != 1 || st.StreamsCompleted != 1 || st.ToolCallsEmitted != int64(len(tt.tools)) {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

func TestModelFaultContextOverflow(t *testing.T) {
	for _, wire := range wires {
		t.Run(wire.name, func(t *testing.T) {
			m, srv := newModelServer(t)
			c := testClient(t)
			small, big := wire.body("hello", 0, 0), wire.body("hello", 0, 4000)
			limit := len(small) + 1000
			addRule(t, m, FaultRule{Endpoint: wire.endpoint, Kind: FaultContextOverflow, PromptBytesOver: limit})

			for range 2 {
				x := send(t, context.Background(), c, srv.URL+wire.path, big)
				if x.err != nil || x.resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("big prompt: %v %v, want 400", x.err, x.resp)
				}
				typ, code, msg := errorBody(t, wire.name, x.body)
				if typ != "invalid_request_error" {
					t.Errorf("type %q", typ)
				}
				tokens, max := estimateTokens(len(big)), limit/4
				if wire.name == "openai" && (code != "context_length_exceeded" ||
					!strings.HasPrefix(msg, fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", max, tokens))) {
					t.Errorf("code %q message %q", code, msg)
				}
				if wire.name == "anthropic" && msg != fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, max) {
					t.Errorf("message %q", msg)
				}
			}
			// A prompt that fits passes and does not fire the rule.
			x := send(t, context.Background(), c, srv.URL+wire.path, small)
			if x.err != nil || x.streamErr != nil || !decode(t, wire.name, x.events).done {
				t.Fatalf("small prompt: %v %v", x.err, x.streamErr)
			}
			if fs := m.Faults(); fs[0].Fired != 2 {
				t.Errorf("rule fired %d times, want 2 (the big prompts only)", fs[0].Fired)
			}
			if st := m.Stats(); st.Requests != 3 || st.Faulted != 2 || st.StreamsCompleted != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestModelFaultRulesKeepToTheirEndpoint: a rule on one format's endpoint
// leaves the other alone, and the oldest unspent rule applies first.
func TestModelFaultRulesKeepToTheirEndpoint(t *testing.T) {
	m, srv := newModelServer(t)
	c := testClient(t)
	addRule(t, m, FaultRule{Endpoint: "messages", Kind: FaultStatus, Status: 529, Times: 1})
	addRule(t, m, FaultRule{Endpoint: "messages", Kind: FaultEmpty, Times: 1})
	if x := send(t, context.Background(), c, srv.URL+"/v1/chat/completions", openAIBody("hello", 0, 0)); x.err != nil || x.resp.StatusCode != 200 {
		t.Fatalf("OpenAI request under Anthropic rules: %v %v", x.err, x.resp)
	}
	if x := send(t, context.Background(), c, srv.URL+"/v1/messages", anthropicBody("hello", 0, 0)); x.err != nil || x.resp.StatusCode != statusOverloaded {
		t.Fatalf("first Anthropic request: %v %v, want 529", x.err, x.resp)
	}
	if x := send(t, context.Background(), c, srv.URL+"/v1/messages", anthropicBody("hello", 0, 0)); x.err != nil || decode(t, "anthropic", x.events).text != "" {
		t.Fatalf("second Anthropic request: want the empty answer")
	}
	if x := send(t, context.Background(), c, srv.URL+"/v1/messages", anthropicBody("hello", 0, 0)); x.err != nil || decode(t, "anthropic", x.events).text == "" {
		t.Fatalf("third Anthropic request: want the script's text")
	}
	if st := m.Stats(); st.Requests != 4 || st.OpenAIRequests != 1 || st.AnthropicRequests != 3 || st.Faulted != 2 {
		t.Errorf("stats %+v", st)
	}
	for _, bad := range []FaultRule{
		{Endpoint: "completions", Kind: FaultEmpty},
		{Endpoint: "messages", Kind: FaultDrop},
		{Endpoint: "messages", Kind: FaultStatus},
		{Endpoint: "messages", Kind: FaultStatus, Status: 302},
		{Endpoint: "messages", Kind: FaultStall, RetryAfterMsHeader: time.Second},
		{Endpoint: "messages", Kind: FaultEmpty, AfterEvents: 2},
		{Endpoint: "messages", Kind: FaultStatus, Status: 429, PromptBytesOver: 10},
		{Endpoint: "messages", Kind: FaultStall, AfterEvents: -1},
	} {
		if err := m.AddFault(bad); err == nil {
			t.Errorf("AddFault(%+v) = nil, want an error", bad)
		}
	}
}
