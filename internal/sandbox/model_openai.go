package sandbox

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"time"
)

// The OpenAI Chat Completions wire format: requests, errors and
// chat.completion.chunk events.

// openAIWire is OpenAI's streaming Chat Completions.
type openAIWire struct{}

func (openAIWire) endpoint() string { return openAIEndpoint }

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

func (openAIWire) parse(body []byte) (modelRequest, *wireError) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return modelRequest{}, &wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: "The request body is not valid JSON: " + err.Error()}
	}
	if req.Model == "" {
		return modelRequest{}, &wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: "you must provide a model parameter"}
	}
	out := modelRequest{model: req.Model, stream: req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	for _, msg := range req.Messages {
		switch msg.Role {
		case "assistant":
			out.assistants++
		case "system", "developer":
			if out.taskID == "" {
				out.taskID = findTaskID(messageText(msg.Content))
			}
		}
	}
	return out, nil
}

// writeError writes an error in the shape OpenAI's API uses, which the
// official SDKs parse into their error types.
func (openAIWire) writeError(w http.ResponseWriter, e wireError) {
	writeJSONBody(w, e.status, map[string]any{"error": openAIErrorObject(e)})
}

// openAIErrorObject is the "error" object of an answer or of a mid-stream
// error event.
func openAIErrorObject(e wireError) map[string]any {
	typ, code, param := "invalid_request_error", e.code, any(nil)
	switch e.kind {
	case errRateLimit:
		typ, code = "requests", "rate_limit_exceeded"
	case errOverloaded, errServer:
		typ = "server_error"
	case errContextOverflow:
		code, param = "context_length_exceeded", "messages"
	}
	var codeField any
	if code != "" {
		codeField = code
	}
	return map[string]any{"message": e.message, "type": typ, "param": param, "code": codeField}
}

// openAIError writes an error in OpenAI's shape with the given type.
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

func (openAIWire) encoder(model string, req modelRequest, promptBytes int) streamEncoder {
	return &openAIEncoder{
		base: chunk{
			ID:      "chatcmpl-" + rand.Text(),
			Object:  "chat.completion.chunk",
			Created: time.Now().Unix(),
			Model:   model,
		},
		includeUsage: req.includeUsage,
		promptBytes:  promptBytes,
		fixed:        req.usage,
	}
}

// openAIEncoder renders chat.completion.chunk events.
type openAIEncoder struct {
	base         chunk
	includeUsage bool
	promptBytes  int
	fixed        *fixedUsage // SetUsage's, when set
}

func (e *openAIEncoder) chunk(d delta, finish string) frame {
	c := e.base
	ch := chunkChoice{Delta: d}
	if finish != "" {
		ch.FinishReason = &finish
	}
	c.Choices = []chunkChoice{ch}
	return dataFrame(mustJSON(c))
}

func (e *openAIEncoder) opening() frame {
	empty := ""
	return e.chunk(delta{Role: "assistant", Content: &empty}, "")
}

func (e *openAIEncoder) answer(st step, finish finishKind) []frame {
	frames := []frame{e.opening()}
	for _, word := range splitWords(st.Text) {
		frames = append(frames, e.chunk(delta{Content: &word}, ""))
	}
	for i, tc := range st.ToolCalls {
		frames = append(frames, e.chunk(delta{ToolCalls: []deltaToolCall{{
			Index:    i,
			ID:       "call_" + rand.Text(),
			Type:     "function",
			Function: deltaFunction{Name: tc.Name},
		}}}, ""))
		for _, frag := range splitFragments(string(tc.Arguments), argumentFragmentBytes) {
			frames = append(frames, e.chunk(delta{ToolCalls: []deltaToolCall{{Index: i, Function: deltaFunction{Arguments: frag}}}}, ""))
		}
		frames[len(frames)-1].toolCallDone = true
	}
	reason := "stop"
	switch {
	case finish == finishLength:
		reason = "length"
	case len(st.ToolCalls) > 0:
		reason = "tool_calls"
	}
	closing := []frame{e.chunk(delta{}, reason)}
	if e.includeUsage {
		u := usage{PromptTokens: estimateTokens(e.promptBytes), CompletionTokens: estimateTokens(completionBytes(st))}
		if e.fixed != nil {
			u.PromptTokens, u.CompletionTokens = e.fixed.input, e.fixed.output
		}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		c := e.base
		c.Choices = []chunkChoice{}
		c.Usage = &u
		closing = append(closing, dataFrame(mustJSON(c)))
	}
	closing = append(closing, frame{text: "data: [DONE]\n\n", last: true})
	for i := range closing {
		closing[i].closing = true
	}
	return append(frames, closing...)
}

func (e *openAIEncoder) endlessOpening() []frame { return []frame{e.opening()} }

func (e *openAIEncoder) endlessText(text string) frame { return e.chunk(delta{Content: &text}, "") }

// errorEvent is a data event carrying an "error" object, as OpenAI sends
// when a stream fails after its 200; openai-go's stream reader ends with it.
func (e *openAIEncoder) errorEvent(kind errKind, message string) frame {
	return dataFrame(mustJSON(map[string]any{"error": openAIErrorObject(wireError{kind: kind, message: message})}))
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

// mustJSON encodes one of the plain values the fake builds, which cannot
// fail to encode.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
