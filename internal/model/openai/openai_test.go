package openai

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

const testKey = "sk-test-5ecret-DO-NOT-LEAK"

// fakeAPI is one OpenAI-compatible test server. handle answers
// POST /v1/chat/completions; every request is counted.
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
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) provider() *Provider {
	return New(Config{BaseURL: f.srv.URL + "/v1", APIKey: testKey})
}

// writeSSE writes each payload as one "data:" event and flushes it.
func writeSSE(w http.ResponseWriter, payloads ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, p := range payloads {
		fmt.Fprintf(w, "data: %s\n\n", p)
		w.(http.Flusher).Flush()
	}
}

func chunk(choice map[string]any) string {
	c := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "usage": nil,
		"choices": []any{}}
	if choice != nil {
		choice["index"] = 0
		c["choices"] = []any{choice}
	}
	b, _ := json.Marshal(c)
	return string(b)
}

func roleChunk() string {
	return chunk(map[string]any{"delta": map[string]any{"role": "assistant", "content": ""}})
}
func textChunk(s string) string {
	return chunk(map[string]any{"delta": map[string]any{"content": s}, "finish_reason": nil})
}
func finishChunk(reason string) string {
	return chunk(map[string]any{"delta": map[string]any{}, "finish_reason": reason})
}
func toolChunk(index int, id, name, args string) string {
	tc := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
	if id != "" {
		tc["id"], tc["type"] = id, "function"
		tc["function"].(map[string]any)["name"] = name
	}
	return chunk(map[string]any{"delta": map[string]any{"tool_calls": []any{tc}}})
}
func usageChunk(in, out int) string {
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}})
	return string(b)
}

var simpleRequest = model.Request{Model: "gpt-test", Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}

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
		writeSSE(w, roleChunk(), textChunk("Hel"), textChunk("lo, "), textChunk("wörld"), finishChunk("stop"),
			usageChunk(11, 4), "[DONE]")
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

func TestStreamToolCallArgsReassemble(t *testing.T) {
	t.Parallel()
	// Split at awkward places: inside a key, inside an escape, inside a
	// multi-byte character's \u escape, between two calls' fragments.
	argsA := `{"path":"dir/ä \"q\".go","lines":[1,2]}`
	argsB := `{"cmd":"echo \u00e9\n"}`
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, roleChunk(),
			toolChunk(0, "call_A", "read_file", ""),
			toolChunk(0, "", "", argsA[:5]),
			toolChunk(1, "call_B", "shell", argsB[:12]),
			toolChunk(0, "", "", argsA[5:17]),
			toolChunk(1, "", "", argsB[12:]),
			toolChunk(0, "", "", argsA[17:]),
			finishChunk("tool_calls"), usageChunk(100, 20), "[DONE]")
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
		acc.Add(ev)
	}
	out, err := acc.Finish(func(string, json.RawMessage) error { return nil })
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	want := []model.ToolCall{
		{ID: "call_A", Name: "read_file", Arguments: json.RawMessage(argsA)},
		{ID: "call_B", Name: "shell", Arguments: json.RawMessage(argsB)},
	}
	if !reflect.DeepEqual(out.ToolCalls, want) {
		t.Fatalf("tool calls =\n%s\nwant\n%s", out.ToolCalls, want)
	}
	if out.FinishReason != "tool_calls" || out.Usage != (model.Usage{InputTokens: 100, OutputTokens: 20}) {
		t.Fatalf("finish %q usage %+v", out.FinishReason, out.Usage)
	}
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	type seen struct {
		auth, org string
		body      []byte
	}
	got := make(chan seen, 1)
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("OpenAI-Organization"), b}
		writeSSE(w, textChunk("ok"), finishChunk("stop"), "[DONE]")
	})
	req := model.Request{
		Model: "gpt-test",
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "be brief"},
			{Role: model.RoleUser, Content: "read x"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: json.RawMessage(`{"path":"x"}`)}}},
			{Role: model.RoleTool, ToolCallID: "call_1", Content: "contents of x"},
		},
		Tools: []model.ToolSpec{{Name: "read_file", Description: "Read a file.", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}},
			"required": []any{"path"}}}},
	}
	s, err := api.provider().Stream(context.Background(), req)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r := <-got
	if r.auth != "Bearer "+testKey {
		t.Fatalf("Authorization = %q, want the configured key", r.auth)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	wantBody := map[string]any{
		"model":          "gpt-test",
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": "read x"},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": `{"path":"x"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "contents of x"},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "read_file", "description": "Read a file.", "parameters": map[string]any{
				"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}},
				"required": []any{"path"}}}}},
	}
	if !reflect.DeepEqual(body, wantBody) {
		gotJSON, _ := json.MarshalIndent(body, "", "  ")
		t.Fatalf("request body:\n%s", gotJSON)
	}
}

// TestConfigIsTheOnlySource checks that the SDK's environment defaults are
// not consulted: neither the base URL, nor the key, nor extra headers.
func TestConfigIsTheOnlySource(t *testing.T) {
	type seen struct{ host, auth, org, custom string }
	got := make(chan seen, 2)
	envAPI := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the request followed OPENAI_BASE_URL")
		http.Error(w, "wrong server", http.StatusTeapot)
	})
	t.Setenv("OPENAI_BASE_URL", envAPI.srv.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Env-Header: yes")

	// A transport that answers every request itself, recording what it saw:
	// with an empty BaseURL the request must target api.openai.com.
	record := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got <- seen{r.URL.Host, r.Header.Get("Authorization"), r.Header.Get("OpenAI-Organization"), r.Header.Get("X-Env-Header")}
		body := "data: " + textChunk("ok") + "\n\ndata: " + finishChunk("stop") + "\n\ndata: [DONE]\n\n"
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
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
	want := seen{host: "api.openai.com", auth: "Bearer " + testKey}
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
		writeSSE(w, textChunk("late"), finishChunk("stop"), "[DONE]")
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
	if !errors.Is(err, io.EOF) || len(evs) != 2 || evs[0].Text != "late" {
		t.Fatalf("events %+v, end %v", evs, err)
	}
}
