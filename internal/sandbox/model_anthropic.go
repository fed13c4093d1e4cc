package sandbox

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
)

// The Anthropic Messages wire format: requests, errors and the typed events
// of a streamed message.

// anthropicWire is Anthropic's streaming Messages API.
type anthropicWire struct{}

func (anthropicWire) endpoint() string { return anthropicEndpoint }

// messagesRequest is the part of a Messages request the fake reads.
type messagesRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"` // a string or text blocks
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream bool `json:"stream"`
}

func (anthropicWire) parse(body []byte) (modelRequest, *wireError) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return modelRequest{}, &wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: "The request body is not valid JSON: " + err.Error()}
	}
	switch {
	case req.Model == "":
		return modelRequest{}, &wireError{status: http.StatusBadRequest, kind: errInvalidRequest, message: "model: Field required"}
	case req.MaxTokens <= 0:
		return modelRequest{}, &wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: "max_tokens: Field required and must be at least 1"}
	}
	out := modelRequest{model: req.Model, stream: req.Stream}
	if len(req.System) > 0 {
		out.taskID = findTaskID(messageText(req.System))
	}
	for _, msg := range req.Messages {
		if msg.Role == "assistant" {
			out.assistants++
		}
	}
	return out, nil
}

// anthropicErrorType is Anthropic's error type for a kind.
func anthropicErrorType(kind errKind) string {
	switch kind {
	case errNotFound:
		return "not_found_error"
	case errRateLimit:
		return "rate_limit_error"
	case errOverloaded:
		return "overloaded_error"
	case errServer:
		return "api_error"
	}
	return "invalid_request_error"
}

// writeError writes {"type":"error","error":{"type":...,"message":...}},
// the shape Anthropic's SDKs parse, with a request-id header as the API
// sends.
func (anthropicWire) writeError(w http.ResponseWriter, e wireError) {
	id := "req_sandbox_" + rand.Text()
	w.Header().Set("request-id", id)
	writeJSONBody(w, e.status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": anthropicErrorType(e.kind), "message": e.message},
		"request_id": id,
	})
}

func (anthropicWire) encoder(model string, req modelRequest, promptBytes int) streamEncoder {
	return &anthropicEncoder{id: "msg_sandbox_" + rand.Text(), model: model, promptBytes: promptBytes, fixed: req.usage}
}

// anthropicEncoder renders the events of one streamed message.
type anthropicEncoder struct {
	id          string
	model       string
	promptBytes int
	fixed       *fixedUsage // SetUsage's, when set
}

// event is one typed event: "event: <type>" and its data.
func anthropicEvent(typ string, data map[string]any) frame {
	data["type"] = typ
	return frame{text: "event: " + typ + "\ndata: " + mustJSON(data) + "\n\n"}
}

// opening is message_start, then a ping, as the API begins every stream.
func (e *anthropicEncoder) opening() []frame {
	return []frame{
		anthropicEvent("message_start", map[string]any{"message": map[string]any{
			"id": e.id, "type": "message", "role": "assistant", "model": e.model,
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": e.inputTokens(), "output_tokens": 1},
		}}),
		anthropicEvent("ping", map[string]any{}),
	}
}

func textBlockStart(index int) frame {
	return anthropicEvent("content_block_start", map[string]any{"index": index,
		"content_block": map[string]any{"type": "text", "text": ""}})
}

func textDelta(index int, text string) frame {
	return anthropicEvent("content_block_delta", map[string]any{"index": index,
		"delta": map[string]any{"type": "text_delta", "text": text}})
}

func blockStop(index int) frame {
	return anthropicEvent("content_block_stop", map[string]any{"index": index})
}

func (e *anthropicEncoder) answer(st step, finish finishKind) []frame {
	frames := e.opening()
	index := 0
	if st.Text != "" {
		frames = append(frames, textBlockStart(index))
		for _, word := range splitWords(st.Text) {
			frames = append(frames, textDelta(index, word))
		}
		frames = append(frames, blockStop(index))
		index++
	}
	for _, tc := range st.ToolCalls {
		frames = append(frames, anthropicEvent("content_block_start", map[string]any{"index": index,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_sandbox_" + rand.Text(),
				"name": tc.Name, "input": map[string]any{}}}))
		for _, frag := range splitFragments(string(tc.Arguments), argumentFragmentBytes) {
			frames = append(frames, anthropicEvent("content_block_delta", map[string]any{"index": index,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": frag}}))
		}
		stop := blockStop(index)
		stop.toolCallDone = true
		frames = append(frames, stop)
		index++
	}
	reason := "end_turn"
	switch {
	case finish == finishLength:
		reason = "max_tokens"
	case len(st.ToolCalls) > 0:
		reason = "tool_use"
	}
	md := anthropicEvent("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": e.outputTokens(st)},
	})
	md.closing = true
	stop := anthropicEvent("message_stop", map[string]any{})
	stop.closing, stop.last = true, true
	return append(frames, md, stop)
}

func (e *anthropicEncoder) endlessOpening() []frame {
	return append(e.opening(), textBlockStart(0))
}

func (e *anthropicEncoder) endlessText(text string) frame { return textDelta(0, text) }

// errorEvent is "event: error", which the API sends when a stream fails
// after its 200 (an overload, most often).
func (e *anthropicEncoder) errorEvent(kind errKind, message string) frame {
	return anthropicEvent("error", map[string]any{"error": map[string]any{
		"type": anthropicErrorType(kind), "message": message}})
}

// inputTokens and outputTokens are the usage the message reports:
// SetUsage's, or the estimate from the bytes.
func (e *anthropicEncoder) inputTokens() int {
	if e.fixed != nil {
		return e.fixed.input
	}
	return estimateTokens(e.promptBytes)
}

func (e *anthropicEncoder) outputTokens(st step) int {
	if e.fixed != nil {
		return e.fixed.output
	}
	return estimateTokens(completionBytes(st))
}
