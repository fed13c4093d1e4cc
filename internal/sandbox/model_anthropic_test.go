package sandbox

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The Anthropic Messages wire format, read as raw server-sent events.

func TestAnthropicStreamsScriptedToolCall(t *testing.T) {
	m, srv := newModelServer(t)
	x := send(t, context.Background(), testClient(t), srv.URL+"/v1/messages", anthropicBody("demo", 1, 0))
	if x.err != nil || x.resp.StatusCode != http.StatusOK || x.streamErr != nil {
		t.Fatalf("exchange: %v %v %v", x.err, x.resp.Status, x.streamErr)
	}
	a := decode(t, "anthropic", x.events)
	if !a.done || a.finish != "tool_use" || a.text != "" {
		t.Errorf("answer = %+v, want a finished tool_use answer without text", a)
	}
	const wantArgs = `{"repo":"capstan-sandbox/demo","branch":"capstan/hello-t-7","path":"HELLO.md",` +
		`"content":"# Hello from capstan\n\nThis file was written by a durable agent task.\n","message":"Add HELLO.md"}`
	if len(a.tools) != 1 || a.tools[0].name != "github_put_file" || a.tools[0].args != wantArgs {
		t.Fatalf("tools = %+v, want github_put_file(%s)", a.tools, wantArgs)
	}
	var deltas int
	var types []string
	for _, ev := range x.events {
		if strings.Contains(ev.data, `"input_json_delta"`) {
			deltas++
		}
		types = append(types, ev.event)
	}
	if deltas < 2 {
		t.Errorf("the input came in %d input_json_delta events, want several", deltas)
	}
	if types[0] != "message_start" || types[1] != "ping" || types[2] != "content_block_start" ||
		types[len(types)-2] != "message_delta" || types[len(types)-1] != "message_stop" {
		t.Errorf("event order %q", types)
	}
	var start struct {
		Message struct {
			ID    string `json:"id"`
			Role  string `json:"role"`
			Model string `json:"model"`
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(x.events[0].data), &start); err != nil || start.Message.Role != "assistant" ||
		start.Message.Model != "demo" || start.Message.Usage.InputTokens <= 0 || !strings.HasPrefix(start.Message.ID, "msg_") {
		t.Errorf("message_start = %s (%v)", x.events[0].data, err)
	}
	st := m.Stats()
	if st.Requests != 1 || st.AnthropicRequests != 1 || st.OpenAIRequests != 0 || st.StreamsCompleted != 1 ||
		st.ToolCallsEmitted != 1 || st.ScriptRequests["demo"] != 1 || st.Faulted != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestAnthropicStepSelectionAndText(t *testing.T) {
	_, srv := newModelServer(t)
	c := testClient(t)
	wantTools := []string{"github_create_branch", "github_put_file", "github_create_pull_request", ""}
	for turn, want := range wantTools {
		x := send(t, context.Background(), c, srv.URL+"/messages", anthropicBody("demo", turn, 0))
		if x.err != nil || x.streamErr != nil {
			t.Fatalf("turn %d: %v %v", turn, x.err, x.streamErr)
		}
		a := decode(t, "anthropic", x.events)
		if want == "" {
			if len(a.tools) != 0 || a.finish != "end_turn" || a.text != strings.ReplaceAll(scriptsByName["demo"].Steps[3].Text, "{{task_id}}", "t-7") {
				t.Errorf("turn %d: %+v, want the final text with end_turn", turn, a)
			}
			continue
		}
		if len(a.tools) != 1 || a.tools[0].name != want || a.finish != "tool_use" || !json.Valid([]byte(a.tools[0].args)) {
			t.Errorf("turn %d: %+v, want one %s", turn, a, want)
		}
	}
}

func TestAnthropicErrors(t *testing.T) {
	m, srv := newModelServer(t)
	c := testClient(t)
	for _, tt := range []struct {
		name, body string
		status     int
		typ, msg   string
	}{
		{"unknown model", string(anthropicBody("claude-nope", 0, 0)), http.StatusNotFound, "not_found_error", "claude-nope"},
		{"no max_tokens", `{"model":"hello","stream":true,"messages":[{"role":"user","content":"hi"}]}`, http.StatusBadRequest, "invalid_request_error", "max_tokens"},
		{"not streaming", `{"model":"hello","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, http.StatusBadRequest, "invalid_request_error", "stream"},
		{"not JSON", `{`, http.StatusBadRequest, "invalid_request_error", "JSON"},
	} {
		x := send(t, context.Background(), c, srv.URL+"/v1/messages", []byte(tt.body))
		if x.err != nil {
			t.Fatalf("%s: %v", tt.name, x.err)
		}
		typ, _, msg := errorBody(t, "anthropic", x.body)
		if x.resp.StatusCode != tt.status || typ != tt.typ || !strings.Contains(msg, tt.msg) || x.resp.Header.Get("request-id") == "" {
			t.Errorf("%s: %d %s %q, want %d %s mentioning %q with a request-id", tt.name, x.resp.StatusCode, typ, msg, tt.status, tt.typ, tt.msg)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET: %s, Allow %q", resp.Status, resp.Header.Get("Allow"))
	}
	if st := m.Stats(); st.Requests != 4 || st.AnthropicRequests != 4 || st.StreamsCompleted != 0 || len(st.ScriptRequests) != 0 {
		t.Errorf("stats = %+v, want 4 Anthropic requests counted and nothing played", st)
	}
	for _, r := range m.Requests() {
		if r.Endpoint != "messages" || r.Script != "" || r.Fault != "" {
			t.Errorf("logged %+v for a rejected request", r)
		}
	}
}
