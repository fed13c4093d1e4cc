package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/capstanhq/capstan/internal/model"
)

const testKey = "sk-ant-test-5ecret-DO-NOT-LEAK"

// fakeAPI is one Anthropic Messages test server. handle answers
// POST /v1/messages; every request is counted.
type fakeAPI struct {
	srv      *httptest.Server
	requests atomic.Int32
}

func newFakeAPI(t *testing.T, handle http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		// Read the whole body first: only then does the server watch the
		// connection, so r.Context() ends when the client goes away.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) provider() *Provider {
	return New(Config{BaseURL: f.srv.URL, APIKey: testKey})
}

// frame is one server-sent event as Anthropic writes it: an "event:" line
// naming the type, then the JSON object on a "data:" line.
type frame struct{ name, data string }

// writeSSE writes each frame and flushes it.
func writeSSE(w http.ResponseWriter, frames ...frame) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, f := range frames {
		if f.name != "" {
			fmt.Fprintf(w, "event: %s\n", f.name)
		}
		fmt.Fprintf(w, "data: %s\n\n", f.data)
		w.(http.Flusher).Flush()
	}
}

func jsonFrame(v map[string]any) frame {
	b, _ := json.Marshal(v)
	return frame{name: v["type"].(string), data: string(b)}
}

func messageStart(inputTokens int) frame {
	return jsonFrame(map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_01", "type": "message", "role": "assistant", "content": []any{}, "model": "claude-test",
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inputTokens, "output_tokens": 1}}})
}
func textStart(index int) frame {
	return jsonFrame(map[string]any{"type": "content_block_start", "index": index,
		"content_block": map[string]any{"type": "text", "text": ""}})
}
func textDelta(index int, s string) frame {
	return jsonFrame(map[string]any{"type": "content_block_delta", "index": index,
		"delta": map[string]any{"type": "text_delta", "text": s}})
}
func toolStart(index int, id, name string) frame {
	return jsonFrame(map[string]any{"type": "content_block_start", "index": index,
		"content_block": map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}}})
}
func jsonDelta(index int, partial string) frame {
	return jsonFrame(map[string]any{"type": "content_block_delta", "index": index,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": partial}})
}
func blockStop(index int) frame {
	return jsonFrame(map[string]any{"type": "content_block_stop", "index": index})
}
func messageDelta(stopReason string, outputTokens int) frame {
	return jsonFrame(map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outputTokens}})
}
func messageStop() frame { return frame{"message_stop", `{"type":"message_stop"}`} }
func ping() frame        { return frame{"ping", `{"type": "ping"}`} }
func errorFrame(typ, msg string) frame {
	return jsonFrame(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// textAnswer is a whole, ordinary answer.
func textAnswer(parts ...string) []frame {
	fs := []frame{messageStart(11), textStart(0), ping()}
	for _, p := range parts {
		fs = append(fs, textDelta(0, p))
	}
	return append(fs, blockStop(0), messageDelta("end_turn", 4), messageStop())
}

var simpleRequest = model.Request{Model: "claude-test", Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}

// drain reads s to its end and returns the events and the final error
// (io.EOF on success).
func drain(t *testing.T, s model.Stream) ([]model.Event, error) {
	t.Helper()
	var evs []model.Event
	for {
		ev, err := s.Recv()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestStreamText(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, textAnswer("Hel", "lo, ", "wörld")...)
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if got := s.Phase(); got != model.PhaseHeadersReceived {
		t.Fatalf("phase after Stream = %s, want %s", got, model.PhaseHeadersReceived)
	}
	evs, err := drain(t, s)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want io.EOF", err)
	}
	want := []model.Event{
		{Kind: model.EventTextDelta, Text: "Hel"},
		{Kind: model.EventTextDelta, Text: "lo, "},
		{Kind: model.EventTextDelta, Text: "wörld"},
		{Kind: model.EventFinish, FinishReason: "stop"},
		{Kind: model.EventUsage, Usage: model.Usage{InputTokens: 11, OutputTokens: 4}},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("events =\n%+v\nwant\n%+v", evs, want)
	}
	if got := s.Phase(); got != model.PhaseStreamCompleted {
		t.Fatalf("phase = %s, want %s", got, model.PhaseStreamCompleted)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the end = %v, want io.EOF again", err)
	}
	if n := api.requests.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

func TestStreamToolUseArgsReassemble(t *testing.T) {
	t.Parallel()
	// Split at awkward places: inside a key, inside an escape, inside a
	// \u escape; the text block comes first, so the calls are blocks 1 and 2.
	argsA := `{"path":"dir/ä \"q\".go","lines":[1,2]}`
	argsB := `{"cmd":"echo \u00e9\n"}`
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, messageStart(100),
			textStart(0), textDelta(0, "Reading."), blockStop(0),
			toolStart(1, "toolu_A", "read_file"),
			jsonDelta(1, ""), // the API opens with an empty fragment
			jsonDelta(1, argsA[:5]), ping(), jsonDelta(1, argsA[5:17]), jsonDelta(1, argsA[17:]),
			blockStop(1),
			toolStart(2, "toolu_B", "shell"),
			jsonDelta(2, argsB[:12]), jsonDelta(2, argsB[12:]),
			blockStop(2),
			messageDelta("tool_use", 20), messageStop())
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var acc model.Accumulator
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if ev.Kind == model.EventToolCallDelta && ev.ArgsDelta == "" && ev.ToolCallID == "" {
			t.Fatalf("an empty fragment became an event: %+v", ev)
		}
		acc.Add(ev)
	}
	out, err := acc.Finish(func(string, json.RawMessage) error { return nil })
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	want := []model.ToolCall{
		{ID: "toolu_A", Name: "read_file", Arguments: json.RawMessage(argsA)},
		{ID: "toolu_B", Name: "shell", Arguments: json.RawMessage(argsB)},
	}
	if !reflect.DeepEqual(out.ToolCalls, want) {
		t.Fatalf("tool calls =\n%s\nwant\n%s", out.ToolCalls, want)
	}
	if out.Text != "Reading." || out.FinishReason != "tool_calls" || out.Usage != (model.Usage{InputTokens: 100, OutputTokens: 20}) {
		t.Fatalf("text %q finish %q usage %+v", out.Text, out.FinishReason, out.Usage)
	}
}

// TestToolUseWithoutArguments: a tool whose input is empty streams no
// fragment at all; the call's arguments are then {}.
func TestToolUseWithoutArguments(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, messageStart(5), toolStart(0, "toolu_1", "list_pulls"), blockStop(0),
			messageDelta("tool_use", 3), messageStop())
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var acc model.Accumulator
	evs, err := drain(t, s)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	for _, ev := range evs {
		acc.Add(ev)
	}
	out, err := acc.Finish(nil)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if len(out.ToolCalls) != 1 || string(out.ToolCalls[0].Arguments) != "{}" || out.ToolCalls[0].Name != "list_pulls" {
		t.Fatalf("tool calls = %s", out.ToolCalls)
	}
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct{ stop, finish string }{
		{"end_turn", "stop"},
		{"stop_sequence", "stop"},
		{"tool_use", "tool_calls"},
		{"max_tokens", "length"},
		{"model_context_window_exceeded", "length"},
		{"pause_turn", "length"},
		{"refusal", "content_filter"},
		{"a_reason_from_the_future", "a_reason_from_the_future"},
	}
	for _, tt := range tests {
		t.Run(tt.stop, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "x"), blockStop(0),
					messageDelta(tt.stop, 2), messageStop())
			})
			s, err := api.provider().Stream(context.Background(), simpleRequest)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			evs, err := drain(t, s)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v", err)
			}
			var finishes []string
			for _, ev := range evs {
				if ev.Kind == model.EventFinish {
					finishes = append(finishes, ev.FinishReason)
				}
			}
			if !reflect.DeepEqual(finishes, []string{tt.finish}) {
				t.Fatalf("finish events %q, want [%q]", finishes, tt.finish)
			}
		})
	}
}

// TestMessageStopEndsTheStream: nothing may follow message_stop, so the
// stream ends there even if the server keeps the connection open.
func TestMessageStopEndsTheStream(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, textAnswer("done")...)
		<-r.Context().Done() // hold the body open until the client goes
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	evs, err := drain(t, s)
	if !errors.Is(err, io.EOF) || len(evs) != 3 {
		t.Fatalf("events %+v, end %v; want text, finish, usage and io.EOF", evs, err)
	}
	if s.Phase() != model.PhaseStreamCompleted {
		t.Fatalf("phase = %s", s.Phase())
	}
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	type seen struct {
		auth, version string
		body          []byte
	}
	got := make(chan seen, 1)
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("Anthropic-Version"), b}
		writeSSE(w, textAnswer("ok")...)
	})
	req := model.Request{
		Model: "claude-test",
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "be brief"},
			{Role: model.RoleUser, Content: "read x and y"},
			{Role: model.RoleAssistant, Content: "Reading both.", ToolCalls: []model.ToolCall{
				{ID: "toolu_1", Name: "read_file", Arguments: json.RawMessage(`{"path":"x"}`)},
				{ID: "toolu_2", Name: "read_file", Arguments: json.RawMessage(`{"path":"y"}`)}}},
			{Role: model.RoleTool, ToolCallID: "toolu_1", Content: "contents of x"},
			{Role: model.RoleTool, ToolCallID: "toolu_2", Content: ""},
			{Role: model.RoleUser, Content: "now summarise"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "toolu_3", Name: "list_pulls"}}},
			{Role: model.RoleTool, ToolCallID: "toolu_3", Content: "[]"},
		},
		Tools: []model.ToolSpec{{Name: "read_file", Description: "Read a file.", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}},
			"required": []any{"path"}, "additionalProperties": false}}},
	}
	p := New(Config{BaseURL: api.srv.URL, APIKey: testKey, MaxTokens: 1234})
	s, err := p.Stream(context.Background(), req)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r := <-got
	if r.auth != "Bearer "+testKey {
		t.Fatalf("Authorization = %q, want the configured key", r.auth)
	}
	if r.version == "" {
		t.Fatal("no anthropic-version header")
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	toolUse := func(id, name string, input map[string]any) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
	}
	wantBody := map[string]any{
		"model":      "claude-test",
		"max_tokens": float64(1234),
		"stream":     true,
		"system":     []any{text("be brief")},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{text("read x and y")}},
			map[string]any{"role": "assistant", "content": []any{text("Reading both."),
				toolUse("toolu_1", "read_file", map[string]any{"path": "x"}),
				toolUse("toolu_2", "read_file", map[string]any{"path": "y"})}},
			// The results of one turn, together and first, then the user's words.
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{text("contents of x")}},
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_2"},
				text("now summarise")}},
			map[string]any{"role": "assistant", "content": []any{toolUse("toolu_3", "list_pulls", map[string]any{})}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_3", "content": []any{text("[]")}}}},
		},
		"tools": []any{map[string]any{"name": "read_file", "description": "Read a file.", "input_schema": map[string]any{
			"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}},
			"required": []any{"path"}, "additionalProperties": false}}},
	}
	if !reflect.DeepEqual(body, wantBody) {
		gotJSON, _ := json.MarshalIndent(body, "", "  ")
		t.Fatalf("request body:\n%s", gotJSON)
	}
}

// TestConfigIsTheOnlySource checks that the SDK's environment defaults are
// not consulted: neither the base URL, nor a credential, nor extra headers.
func TestConfigIsTheOnlySource(t *testing.T) {
	type seen struct{ host, auth, apiKey, custom string }
	got := make(chan seen, 2)
	envAPI := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the request followed ANTHROPIC_BASE_URL")
		http.Error(w, "wrong server", http.StatusTeapot)
	})
	t.Setenv("ANTHROPIC_BASE_URL", envAPI.srv.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Env-Header: yes")

	// A transport that answers every request itself, recording what it saw:
	// with an empty BaseURL the request must target api.anthropic.com.
	record := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got <- seen{r.URL.Host, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("X-Env-Header")}
		var body strings.Builder
		for _, f := range textAnswer("ok") {
			fmt.Fprintf(&body, "event: %s\ndata: %s\n\n", f.name, f.data)
		}
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(body.String())), Request: r}, nil
	})
	p := New(Config{APIKey: testKey, HTTPClient: &http.Client{Transport: record}})
	s, err := p.Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := drain(t, s); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	r := <-got
	want := seen{host: "api.anthropic.com", auth: "Bearer " + testKey}
	if r != want {
		t.Fatalf("request = %+v, want %+v", r, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestStreamReturnsAtHeaders checks that Stream returns as soon as the
// response headers arrive, without waiting for (or consuming) the first
// event: the server sends nothing more until Stream has returned.
func TestStreamReturnsAtHeaders(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		writeSSE(w, textAnswer("late")...)
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if got := s.Phase(); got != model.PhaseHeadersReceived {
		t.Fatalf("phase = %s, want %s", got, model.PhaseHeadersReceived)
	}
	close(release)
	evs, err := drain(t, s)
	if !errors.Is(err, io.EOF) || len(evs) != 3 || evs[0].Text != "late" {
		t.Fatalf("events %+v, end %v", evs, err)
	}
}
