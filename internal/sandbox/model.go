package sandbox

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxFakeRequestBytes bounds a request body the fakes will read.
const maxFakeRequestBytes = 32 << 20

// argumentFragmentBytes is the most bytes of tool-call arguments sent in one
// chunk. It is small on purpose: real providers split arguments at arbitrary
// points, and clients must accumulate fragments rather than expect whole JSON.
const argumentFragmentBytes = 16

// Model is a fake OpenAI-compatible model provider. It serves streaming Chat
// Completions (POST /v1/chat/completions or /chat/completions) by playing the
// script the request's model field names, and GET /_sandbox/stats.
//
// Model is stateless across requests apart from its counters: the step played
// is the number of assistant messages in the request, so retrying a request
// replays the same step. It accepts any Authorization header and needs none.
// It is safe for concurrent use.
type Model struct {
	faultPoint
	control map[string]http.HandlerFunc // the /_sandbox/ endpoints

	mu    sync.Mutex
	stats ModelStats
	last  []byte
}

// ModelStats counts what the model fake has done. Requests rejected by a
// fault are not counted.
type ModelStats struct {
	// Requests is the number of completion requests the fake handled,
	// including the ones it rejected (bad JSON, unknown script, ...).
	Requests int64 `json:"requests"`
	// StreamsCompleted is the number of streams written through to
	// "data: [DONE]". (A connection lost during the very last flush is
	// still counted.)
	StreamsCompleted int64 `json:"streams_completed"`
	// ToolCallsEmitted is the number of tool calls whose every argument
	// fragment was written.
	ToolCallsEmitted int64 `json:"tool_calls_emitted"`
	// ScriptRequests counts requests per known script name.
	ScriptRequests map[string]int64 `json:"script_requests"`
}

// NewModel returns a model fake with zeroed counters and no fault.
func NewModel() *Model {
	m := &Model{stats: ModelStats{ScriptRequests: map[string]int64{}}}
	m.control = map[string]http.HandlerFunc{"stats": statsHandler(m.Stats)}
	return m
}

// Stats returns a snapshot of the counters.
func (m *Model) Stats() ModelStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.ScriptRequests = maps.Clone(m.stats.ScriptRequests)
	return s
}

// LastRequest returns a copy of the body of the last completion request the
// fake handled (nil if none), so tests can check what a client sent.
func (m *Model) LastRequest() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.last...)
}

// ServeHTTP implements [http.Handler]. GET /_sandbox/stats returns the
// counters; the installed fault, if any, runs before anything else is read
// or counted.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveFake(w, r, &m.faultPoint, m.control, http.HandlerFunc(m.serve))
}

// chatRequest is the part of a Chat Completions request the fake reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// serve handles a request that no fault answered.
func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/chat/completions" {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "unknown_url",
			fmt.Sprintf("Unknown request URL: %s %s. The sandbox model serves POST /v1/chat/completions.", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		openAIError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
			fmt.Sprintf("Method %s is not allowed; use POST.", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFakeRequestBytes))

	m.mu.Lock()
	m.stats.Requests++
	if err == nil {
		m.last = body
	}
	m.mu.Unlock()

	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "", "Could not read the request body: "+err.Error())
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "", "The request body is not valid JSON: "+err.Error())
		return
	}
	if req.Model == "" {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "", "you must provide a model parameter")
		return
	}
	if !req.Stream {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "",
			`The sandbox model only streams: set "stream": true.`)
		return
	}
	sc, ok := lookupScript(req.Model)
	if !ok {
		openAIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist. The sandbox model knows the scripts %s, and turns-N for 1 <= N <= %d.",
				req.Model, strings.Join(ScriptNames(), ", "), maxTurns))
		return
	}

	assistants, taskID := 0, ""
	for _, msg := range req.Messages {
		switch msg.Role {
		case "assistant":
			assistants++
		case "system", "developer":
			if taskID == "" {
				taskID = findTaskID(messageText(msg.Content))
			}
		}
	}
	m.mu.Lock()
	m.stats.ScriptRequests[sc.Name]++
	m.mu.Unlock()

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	m.stream(w, sc.Name, sc.stepAt(assistants).expand(taskID), includeUsage, len(body))
}

// stream writes one step as a server-sent event stream. It stops at the first
// write error (the client went away); such a stream is not counted as
// completed, and only tool calls written in full count as emitted.
func (m *Model) stream(w http.ResponseWriter, model string, st step, includeUsage bool, promptBytes int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)

	out := &sseWriter{w: w, rc: http.NewResponseController(w)}
	base := chunk{
		ID:      "chatcmpl-" + rand.Text(),
		Object:  "chat.completion.chunk",
		Created: time.Now().Unix(),
		Model:   model,
	}
	emit := func(d delta, finish string) {
		c := base
		ch := chunkChoice{Delta: d}
		if finish != "" {
			ch.FinishReason = &finish
		}
		c.Choices = []chunkChoice{ch}
		out.send(c)
	}

	empty := ""
	emit(delta{Role: "assistant", Content: &empty}, "")
	for _, word := range splitWords(st.Text) {
		emit(delta{Content: &word}, "")
	}
	for i, tc := range st.ToolCalls {
		emit(delta{ToolCalls: []deltaToolCall{{
			Index:    i,
			ID:       "call_" + rand.Text(),
			Type:     "function",
			Function: deltaFunction{Name: tc.Name},
		}}}, "")
		for _, frag := range splitFragments(string(tc.Arguments), argumentFragmentBytes) {
			emit(delta{ToolCalls: []deltaToolCall{{Index: i, Function: deltaFunction{Arguments: frag}}}}, "")
		}
		if out.err != nil {
			return
		}
		m.mu.Lock()
		m.stats.ToolCallsEmitted++
		m.mu.Unlock()
	}
	finish := "stop"
	if len(st.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	emit(delta{}, finish)

	if includeUsage {
		// Roughly four bytes a token: close enough for a sandbox, and
		// always positive so clients see that usage arrived.
		completion := len(st.Text)
		for _, tc := range st.ToolCalls {
			completion += len(tc.Name) + len(tc.Arguments)
		}
		u := usage{PromptTokens: promptBytes/4 + 1, CompletionTokens: completion/4 + 1}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		c := base
		c.Choices = []chunkChoice{}
		c.Usage = &u
		out.send(c)
	}
	// The stream counts as completed once [DONE] is buffered and before it
	// is flushed, so a client that has read [DONE] always finds the count.
	out.write("[DONE]")
	if out.err != nil {
		return
	}
	m.mu.Lock()
	m.stats.StreamsCompleted++
	m.mu.Unlock()
	out.flush()
}

// chunk is a chat.completion.chunk object.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []deltaToolCall `json:"tool_calls,omitempty"`
}

type deltaToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function deltaFunction `json:"function"`
}

type deltaFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// sseWriter writes "data:" events and flushes each one, so the client sees
// every chunk as it is produced. After the first error it writes nothing.
type sseWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (s *sseWriter) send(v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	s.sendRaw(string(b))
}

func (s *sseWriter) sendRaw(data string) {
	s.write(data)
	s.flush()
}

func (s *sseWriter) write(data string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, "data: "+data+"\n\n")
	}
}

// flush pushes buffered events to the client. A writer that cannot flush
// (a fault's recorder, say) is not an error: the events go out when the
// handler returns.
func (s *sseWriter) flush() {
	if s.err != nil {
		return
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}

// splitWords splits text into pieces that each end after a space, so that
// their concatenation is exactly text.
func splitWords(text string) []string {
	if text == "" {
		return nil
	}
	return strings.SplitAfter(text, " ")
}

// splitFragments cuts s into pieces of at most n bytes, never inside a UTF-8
// sequence (a cut rune could not travel inside a JSON string).
func splitFragments(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		end := min(n, len(s))
		for end < len(s) && end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 { // a single rune longer than n bytes
			_, end = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// openAIError writes an error in the shape OpenAI's API uses, which the
// official SDKs parse into their error types.
func openAIError(w http.ResponseWriter, status int, typ, code, message string) {
	var codeField any
	if code != "" {
		codeField = code
	}
	writeJSONBody(w, status, map[string]any{"error": map[string]any{
		"message": message,
		"type":    typ,
		"param":   nil,
		"code":    codeField,
	}})
}
