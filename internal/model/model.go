// Package model defines the provider-neutral view of one model attempt: the
// request capstan sends, the events a streaming provider yields, and the
// transport phase an attempt reached. Providers (openai/, anthropic/)
// map their SDK's stream onto these types so the turn guard in the workflow
// never depends on a vendor's wire format. Attempt runs one attempt: the
// request, its watchdogs, its phase and the classification of its ending.
package model

import (
	"context"
	"encoding/json"

	"github.com/capstanhq/capstan/tool"
)

// Role of a transcript message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one transcript item as the model sees it. Items are stored once,
// content-addressed, in the ledger database; workflow history only carries
// their references.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"` // for RoleTool
}

// ToolCall is a complete tool call as committed by a completed attempt.
// ID is the model protocol's correlation id (tool_call_id); it is never used
// as an operation id.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolSpec describes a tool offered to the model: the public tool.Spec, so
// that a registry's specs go into a request as they are.
type ToolSpec = tool.Spec

// Request is what one attempt sends.
type Request struct {
	Model    string // provider-specific model name, without the "provider:" prefix
	Messages []Message
	Tools    []ToolSpec
	// Recorder, when set, is the caller's record of how far the attempt's
	// transport got; the provider advances it from the first byte written,
	// so the caller knows the phase even while Stream has not returned (an
	// attempt cut before the response headers). Nil: the provider keeps
	// its own.
	Recorder *PhaseRecorder
}

// EventKind tells which fields of an Event are set.
type EventKind int

const (
	EventTextDelta     EventKind = iota + 1 // Text
	EventToolCallDelta                      // ToolIndex, ToolCallID (first delta), ToolName (first delta), ArgsDelta
	EventFinish                             // FinishReason
	EventUsage                              // Usage
)

// Event is one item of a provider's stream.
type Event struct {
	Kind         EventKind
	Text         string
	ToolIndex    int
	ToolCallID   string
	ToolName     string
	ArgsDelta    string
	FinishReason string
	Usage        Usage
}

// Usage reports token counts when the provider sends them.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Phase is the furthest point an attempt's HTTP exchange reached (docs/design.md §4.1).
// Phases only move forward.
type Phase string

const (
	PhaseNotSent         Phase = "NOT_SENT"
	PhaseSentNoHeaders   Phase = "SENT_NO_HEADERS"
	PhaseHeadersReceived Phase = "HEADERS_RECEIVED"
	PhaseStreamPartial   Phase = "STREAM_PARTIAL"
	PhaseStreamCompleted Phase = "STREAM_COMPLETED"
	PhaseUnknown         Phase = "UNKNOWN"
)

// Provider starts attempts against one model provider.
type Provider interface {
	// Name is the provider part of "provider:model", e.g. "openai".
	Name() string
	// Stream sends the request and returns the open stream. A returned error
	// is an *AttemptError describing how far the request got.
	Stream(ctx context.Context, req Request) (Stream, error)
}

// Stream yields the events of one attempt.
type Stream interface {
	// Recv returns the next event, io.EOF after the last one, or an
	// *AttemptError.
	Recv() (Event, error)
	// Phase is the furthest phase reached so far; safe to call concurrently
	// with Recv.
	Phase() Phase
	// Close releases the stream. It is idempotent and may be called from
	// another goroutine while Recv is blocked (a watchdog cutting the
	// attempt); that Recv then returns an error.
	Close() error
}
