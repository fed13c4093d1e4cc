package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Helpers that speak both wire formats over real HTTP, reading the raw
// server-sent events, so the tests check the bytes a client gets.

// wireCase is one of the model's wire formats, as a client uses it.
type wireCase struct {
	name     string // "openai" or "anthropic"
	path     string
	endpoint string // the fault-rule endpoint
	// body is a streaming request for model with the given number of
	// assistant turns and a user message padded with pad bytes.
	body func(model string, assistants, pad int) []byte
}

var wires = []wireCase{
	{name: "openai", path: "/v1/chat/completions", endpoint: "chat/completions", body: openAIBody},
	{name: "anthropic", path: "/v1/messages", endpoint: "messages", body: anthropicBody},
}

const testSystem = "You are an agent.\nTask id: t-7\n"

func openAIBody(model string, assistants, pad int) []byte {
	msgs := []map[string]any{{"role": "system", "content": testSystem}, {"role": "user", "content": "go" + strings.Repeat("x", pad)}}
	for range assistants {
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "done"}, map[string]any{"role": "user", "content": "ok"})
	}
	return []byte(mustJSON(map[string]any{"model": model, "stream": true, "messages": msgs,
		"stream_options": map[string]any{"include_usage": true}}))
}

func anthropicBody(model string, assistants, pad int) []byte {
	msgs := []map[string]any{{"role": "user", "content": "go" + strings.Repeat("x", pad)}}
	for range assistants {
		msgs = append(msgs, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "done"}}},
			map[string]any{"role": "user", "content": "ok"})
	}
	return []byte(mustJSON(map[string]any{"model": model, "stream": true, "max_tokens": 1024,
		"system": []any{map[string]any{"type": "text", "text": testSystem}}, "messages": msgs}))
}

// sseEvent is one server-sent event as a client parses it.
type sseEvent struct {
	event string // the "event:" field; empty for OpenAI
	data  string
}

// readEvents parses events from r and sends each to out as it completes; it
// returns what ended the body (nil at a clean end).
func readEvents(r io.Reader, out chan<- sseEvent) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var ev sseEvent
	var open bool
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if open {
				out <- ev
			}
			ev, open = sseEvent{}, false
		case strings.HasPrefix(line, "event: "):
			ev.event, open = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			ev.data, open = strings.TrimPrefix(line, "data: "), true
		default:
			return errors.New("not an SSE line: " + line)
		}
	}
	if open {
		return errors.New("the body ended inside an event")
	}
	return sc.Err()
}

// exchange is one request to the model as the client saw it.
type exchange struct {
	resp      *http.Response // nil when no headers arrived
	err       error          // what client.Do returned
	body      []byte         // a non-stream answer's body
	events    []sseEvent     // a stream's events
	streamErr error          // what ended the stream (nil: a clean end)
	wrote     bool           // the transport wrote the whole request
	firstByte bool           // a response byte arrived
}

// testClient is a client with its own connections, so no test reuses
// another's.
func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// send posts body and reads the whole answer.
func send(t *testing.T, ctx context.Context, c *http.Client, url string, body []byte) exchange {
	t.Helper()
	var x exchange
	var wrote, first atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest:         func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
		GotFirstResponseByte: func() { first.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	x.resp, x.err = c.Do(req)
	if x.err == nil {
		defer x.resp.Body.Close()
		if x.resp.Header.Get("Content-Type") == "text/event-stream" {
			ch := make(chan sseEvent, 1024)
			x.streamErr = readEvents(x.resp.Body, ch)
			close(ch)
			for ev := range ch {
				x.events = append(x.events, ev)
			}
		} else {
			x.body, x.err = io.ReadAll(x.resp.Body)
		}
	}
	x.wrote, x.firstByte = wrote.Load(), first.Load()
	return x
}

// answer is a stream decoded in terms both formats share.
type answer struct {
	text   string
	tools  []toolCallSeen
	finish string // finish_reason or stop_reason
	done   bool   // [DONE] or message_stop arrived
	errTyp string // a mid-stream error's type (OpenAI: its code when set)
	events int
}

type toolCallSeen struct{ name, args string }

// decode checks a stream's structure and decodes it.
func decode(t *testing.T, wire string, events []sseEvent) answer {
	t.Helper()
	a := answer{events: len(events)}
	for i, ev := range events {
		if a.done || a.errTyp != "" {
			t.Fatalf("event %d after the end: %+v", i, ev)
		}
		if wire == "openai" {
			decodeOpenAI(t, &a, ev)
		} else {
			decodeAnthropic(t, &a, i, ev)
		}
	}
	return a
}

func decodeOpenAI(t *testing.T, a *answer, ev sseEvent) {
	t.Helper()
	if ev.event != "" {
		t.Fatalf("OpenAI event with a type: %+v", ev)
	}
	if ev.data == "[DONE]" {
		a.done = true
		return
	}
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Index    int `json:"index"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Error *struct{ Type, Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
		t.Fatalf("chunk %s: %v", ev.data, err)
	}
	if c.Error != nil {
		a.errTyp = c.Error.Type
		if c.Error.Code != "" {
			a.errTyp = c.Error.Code
		}
		return
	}
	if c.Object != "chat.completion.chunk" {
		t.Fatalf("chunk object %q", c.Object)
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != nil {
			a.text += *ch.Delta.Content
		}
		for _, tc := range ch.Delta.ToolCalls {
			for len(a.tools) <= tc.Index {
				a.tools = append(a.tools, toolCallSeen{})
			}
			a.tools[tc.Index].name += tc.Function.Name
			a.tools[tc.Index].args += tc.Function.Arguments
		}
		if ch.FinishReason != nil {
			a.finish = *ch.FinishReason
		}
	}
}

func decodeAnthropic(t *testing.T, a *answer, i int, ev sseEvent) {
	t.Helper()
	var d struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock struct {
			Type, Name string
		} `json:"content_block"`
		Delta struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		} `json:"delta"`
		Usage *struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
		Error struct{ Type, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		t.Fatalf("event %s: %v", ev.data, err)
	}
	if d.Type != ev.event {
		t.Fatalf("event %q carries data of type %q", ev.event, d.Type)
	}
	if (i == 0) != (ev.event == "message_start") {
		t.Fatalf("event %d is %s; message_start must come first and once", i, ev.event)
	}
	switch ev.event {
	case "content_block_start":
		if d.ContentBlock.Type == "tool_use" {
			a.tools = append(a.tools, toolCallSeen{name: d.ContentBlock.Name})
		}
	case "content_block_delta":
		switch d.Delta.Type {
		case "text_delta":
			a.text += d.Delta.Text
		case "input_json_delta":
			a.tools[len(a.tools)-1].args += d.Delta.PartialJSON
		default:
			t.Fatalf("delta type %q", d.Delta.Type)
		}
	case "message_delta":
		a.finish = d.Delta.StopReason
		if d.Usage == nil || d.Usage.OutputTokens <= 0 {
			t.Fatalf("message_delta without usage: %s", ev.data)
		}
	case "message_stop":
		a.done = true
	case "error":
		a.errTyp = d.Error.Type
	case "message_start", "ping", "content_block_stop":
	default:
		t.Fatalf("unknown event %q", ev.event)
	}
}

// errorBody decodes an error answer in either shape: its type and message,
// and for OpenAI its code.
func errorBody(t *testing.T, wire string, body []byte) (typ, code, msg string) {
	t.Helper()
	var b struct {
		Type  string `json:"type"`
		Error struct {
			Type    string  `json:"type"`
			Code    *string `json:"code"`
			Message string  `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if wire == "anthropic" && b.Type != "error" {
		t.Fatalf("Anthropic error body %s lacks \"type\":\"error\"", body)
	}
	if b.Error.Code != nil {
		code = *b.Error.Code
	}
	return b.Error.Type, code, b.Error.Message
}

// newWireServer runs a fresh model fake and says when one of its handlers
// starts holding a request.
func newWireServer(t *testing.T) (*Model, *httptest.Server, <-chan struct{}) {
	t.Helper()
	m, srv := newModelServer(t)
	holding := make(chan struct{}, 16)
	m.SetOnHold(func() { holding <- struct{}{} })
	return m, srv, holding
}

// waitHeldDone waits until every handler that held a request has returned,
// failing if one outlives its client.
func waitHeldDone(t *testing.T, m *Model) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.held.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a held handler did not return after its client left")
	}
}

// waitFor receives from ch or fails after a generous bound.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
