package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/capstanhq/capstan/internal/testenv"
)

// newModelServer runs a fresh model fake for one test.
func newModelServer(t *testing.T) (*Model, *httptest.Server) {
	t.Helper()
	m := NewModel()
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

// newOpenAIClient is the official client pointed at the fake, with its own
// retries off so each call is exactly one request.
func newOpenAIClient(baseURL string) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey("sk-sandbox"),
		option.WithMaxRetries(0),
	)
}

// streamResult is what one streamed completion accumulated to.
type streamResult struct {
	acc      openai.ChatCompletionAccumulator
	chunks   int
	argFrags int // chunks carrying an argument fragment
}

// complete streams one completion through the official client and
// accumulator.
func complete(t *testing.T, client openai.Client, params openai.ChatCompletionNewParams) (streamResult, error) {
	t.Helper()
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	defer stream.Close()
	var res streamResult
	for stream.Next() {
		c := stream.Current()
		if !res.acc.AddChunk(c) {
			t.Fatalf("accumulator rejected chunk %d: %s", res.chunks, c.RawJSON())
		}
		res.chunks++
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID == "" && tc.Function.Arguments != "" {
					res.argFrags++
				}
			}
		}
	}
	return res, stream.Err()
}

// conversation builds messages with the given number of assistant turns.
func conversation(assistantTurns int) []openai.ChatCompletionMessageParamUnion {
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Add a HELLO.md to the demo repo.")}
	for range assistantTurns {
		msgs = append(msgs, openai.AssistantMessage("step done"), openai.UserMessage("ok"))
	}
	return msgs
}

func TestModelStreamsScriptedToolCall(t *testing.T) {
	m, srv := newModelServer(t)
	client := newOpenAIClient(srv.URL + "/v1")

	msgs := append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are an agent.\nTask id: t-42\nRepository: x/y.")}, conversation(1)...)
	res, err := complete(t, client, openai.ChatCompletionNewParams{
		Model:         "demo",
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(res.acc.Choices) != 1 {
		t.Fatalf("choices = %d, want 1", len(res.acc.Choices))
	}
	choice := res.acc.Choices[0]
	if choice.FinishReason != "tool_calls" {
		t.Errorf("finish reason = %q, want tool_calls", choice.FinishReason)
	}
	if len(choice.Message.ToolCalls) != 1 {
		t.Fatalf("tool calls = %d, want 1", len(choice.Message.ToolCalls))
	}
	tc := choice.Message.ToolCalls[0]
	if tc.Function.Name != "github_put_file" {
		t.Errorf("tool name = %q, want github_put_file", tc.Function.Name)
	}
	if !strings.HasPrefix(tc.ID, "call_") {
		t.Errorf("tool call id = %q, want call_ prefix", tc.ID)
	}
	// The script's {{task_id}} expands to the task id of the system message.
	const wantArgs = `{"repo":"capstan-sandbox/demo","branch":"capstan/hello-t-42","path":"HELLO.md",` +
		`"content":"# Hello from capstan\n\nThis file was written by a durable agent task.\n","message":"Add HELLO.md"}`
	if tc.Function.Arguments != wantArgs {
		t.Errorf("arguments =\n%s\nwant\n%s", tc.Function.Arguments, wantArgs)
	}
	if res.argFrags < 2 {
		t.Errorf("arguments came in %d fragments, want several", res.argFrags)
	}
	if res.acc.Usage.TotalTokens <= 0 || res.acc.Usage.TotalTokens != res.acc.Usage.PromptTokens+res.acc.Usage.CompletionTokens {
		t.Errorf("usage = %+v, want positive and consistent", res.acc.Usage)
	}

	st := m.Stats()
	if st.Requests != 1 || st.StreamsCompleted != 1 || st.ToolCallsEmitted != 1 || st.ScriptRequests["demo"] != 1 {
		t.Errorf("stats = %+v, want 1 request, 1 stream, 1 tool call, demo 1", st)
	}
	if !strings.Contains(string(m.LastRequest()), `"model":"demo"`) {
		t.Errorf("last request %s does not name the model", m.LastRequest())
	}
}

func TestModelStepSelection(t *testing.T) {
	_, srv := newModelServer(t)
	client := newOpenAIClient(srv.URL + "/v1")

	wantTools := []string{"github_create_branch", "github_put_file", "github_create_pull_request", ""}
	for turn, want := range wantTools {
		res, err := complete(t, client, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(turn)})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		msg := res.acc.Choices[0].Message
		if want == "" {
			if len(msg.ToolCalls) != 0 || res.acc.Choices[0].FinishReason != "stop" {
				t.Errorf("turn %d: got %d tool calls, finish %q; want a final answer", turn, len(msg.ToolCalls), res.acc.Choices[0].FinishReason)
			}
			if !strings.Contains(msg.Content, "capstan/hello") || !strings.Contains(msg.Content, "pull request") {
				t.Errorf("turn %d: final text %q does not summarise the work", turn, msg.Content)
			}
			continue
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != want {
			t.Errorf("turn %d: tool calls = %+v, want one %s", turn, msg.ToolCalls, want)
		}
	}
	if res, _ := complete(t, client, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(0)}); res.acc.Choices[0].Message.Content != "I'll make a branch for the change." {
		t.Errorf("step 1 text = %q", res.acc.Choices[0].Message.Content)
	}

	res, err := complete(t, client, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(len(wantTools))})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.acc.Choices[0].Message.Content; got != exhaustedText || res.acc.Choices[0].FinishReason != "stop" {
		t.Errorf("past the end: %q (%s), want %q (stop)", got, res.acc.Choices[0].FinishReason, exhaustedText)
	}
}

func TestModelTurnsN(t *testing.T) {
	m, srv := newModelServer(t)
	client := newOpenAIClient(srv.URL + "/v1")

	for turn := range 3 {
		res, err := complete(t, client, openai.ChatCompletionNewParams{Model: "turns-3", Messages: conversation(turn)})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		ch := res.acc.Choices[0]
		if turn < 2 {
			if len(ch.Message.ToolCalls) != 1 || ch.FinishReason != "tool_calls" {
				t.Fatalf("turn %d: %d tool calls, finish %q", turn, len(ch.Message.ToolCalls), ch.FinishReason)
			}
			tc := ch.Message.ToolCalls[0].Function
			if tc.Name != "github_get_file" || tc.Arguments != `{"repo":"capstan-sandbox/demo","path":"README.md"}` {
				t.Errorf("turn %d: tool call %s(%s)", turn, tc.Name, tc.Arguments)
			}
			if ch.Message.Content == "" {
				t.Errorf("turn %d: no text", turn)
			}
			continue
		}
		if len(ch.Message.ToolCalls) != 0 || ch.FinishReason != "stop" || ch.Message.Content == exhaustedText {
			t.Errorf("final turn: %d tool calls, finish %q, text %q", len(ch.Message.ToolCalls), ch.FinishReason, ch.Message.Content)
		}
	}
	if got := m.Stats().ScriptRequests["turns-3"]; got != 3 {
		t.Errorf("turns-3 requests = %d, want 3", got)
	}

	for _, name := range []string{"turns-0", "turns-1001", "turns-01", "turns-x", "turns-"} {
		_, err := complete(t, client, openai.ChatCompletionNewParams{Model: name, Messages: conversation(0)})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("%s: err = %v, want 404", name, err)
		}
	}
	if _, err := complete(t, client, openai.ChatCompletionNewParams{Model: "turns-1000", Messages: conversation(999)}); err != nil {
		t.Errorf("turns-1000: %v", err)
	}
}

func TestModelUnknownScript(t *testing.T) {
	m, srv := newModelServer(t)
	client := newOpenAIClient(srv.URL + "/v1")

	_, err := complete(t, client, openai.ChatCompletionNewParams{Model: "gpt-nope", Messages: conversation(0)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *openai.Error", err)
	}
	if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Errorf("status %d code %q, want 404 model_not_found", apiErr.StatusCode, apiErr.Code)
	}
	for _, name := range ScriptNames() {
		if !strings.Contains(apiErr.Message, name) {
			t.Errorf("message %q does not name script %q", apiErr.Message, name)
		}
	}
	if st := m.Stats(); st.Requests != 1 || st.StreamsCompleted != 0 || len(st.ScriptRequests) != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestModelRequiresStream(t *testing.T) {
	_, srv := newModelServer(t)
	resp, err := http.Post(srv.URL+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"hello","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || body.Error.Type != "invalid_request_error" || body.Error.Message == "" {
		t.Errorf("status %d, error %+v; want 400 invalid_request_error", resp.StatusCode, body.Error)
	}
}

// TestModelWireFormat reads the raw stream without an SDK: every event is a
// "data:" line, the text deltas rebuild the answer, and [DONE] ends it.
func TestModelWireFormat(t *testing.T) {
	_, srv := newModelServer(t)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"hello","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer anything")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	var text strings.Builder
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		events = append(events, data)
		if data == "[DONE]" {
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("object %q", c.Object)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
	}
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events = %q, want several ending with [DONE]", events)
	}
	if want := scriptsByName["hello"].Steps[0].Text; text.String() != want {
		t.Errorf("text = %q, want %q", text.String(), want)
	}
}

func TestModelFaultAnswersFirst(t *testing.T) {
	m, srv := newModelServer(t)
	m.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		openAIError(w, http.StatusServiceUnavailable, "server_error", "", "injected")
		return true
	})
	client := newOpenAIClient(srv.URL + "/v1")
	_, err := complete(t, client, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(0)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want the injected 503", err)
	}
	if st := m.Stats(); st.Requests != 0 || st.StreamsCompleted != 0 || len(st.ScriptRequests) != 0 {
		t.Errorf("stats moved under a fault: %+v", st)
	}
	if m.LastRequest() != nil {
		t.Errorf("last request recorded under a fault")
	}

	m.SetFault(nil)
	if _, err := complete(t, client, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(0)}); err != nil {
		t.Fatalf("after removing the fault: %v", err)
	}

	// /_sandbox/stats bypasses faults.
	m.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	})
	var st ModelStats
	testenv.GetJSON(t, srv.URL+"/_sandbox/stats", &st)
	if st.Requests != 1 || st.StreamsCompleted != 1 || st.ScriptRequests["demo"] != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestScripts(t *testing.T) {
	names := ScriptNames()
	if len(names) < 2 || names[0] != "demo" || names[1] != "hello" {
		t.Errorf("ScriptNames() = %q, want demo and hello first", names)
	}
	demo := scriptsByName["demo"]
	if len(demo.Steps) != 4 || len(demo.Steps[3].ToolCalls) != 0 {
		t.Errorf("demo has %d steps; want 3 tool steps and a final answer", len(demo.Steps))
	}
	for _, bad := range []string{
		`{"name":"x","steps":[]}`,
		`{"name":"x","steps":[{}]}`,
		`{"name":"x","steps":[{"tool_calls":[{"name":"t","arguments":[1]}]}]}`,
		`{"name":"turns-2","steps":[{"text":"hi"}]}`,
		`{"name":"x","steps":[{"text":"hi"}],"extra":1}`,
	} {
		if _, err := parseScript([]byte(bad)); err == nil {
			t.Errorf("parseScript(%s) = nil error", bad)
		}
	}
	for _, frags := range [][]string{splitFragments("héllo wörld ünïcode", 3), splitFragments("abc", 16)} {
		for _, f := range frags {
			if !utf8.ValidString(f) {
				t.Errorf("fragment %q cuts a rune", f)
			}
		}
	}
	if got := strings.Join(splitFragments("héllo wörld ünïcode", 3), ""); got != "héllo wörld ünïcode" {
		t.Errorf("fragments rejoin to %q", got)
	}
}
