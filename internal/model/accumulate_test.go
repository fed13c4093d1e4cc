package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func evText(s string) Event   { return Event{Kind: EventTextDelta, Text: s} }
func evFinish(r string) Event { return Event{Kind: EventFinish, FinishReason: r} }
func evCall(i int, id, name, args string) Event {
	return Event{Kind: EventToolCallDelta, ToolIndex: i, ToolCallID: id, ToolName: name, ArgsDelta: args}
}

// validateKnown accepts the tools "read" and "write"; "write" needs a "path".
func validateKnown(name string, args json.RawMessage) error {
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		return err
	}
	switch name {
	case "read":
		return nil
	case "write":
		if _, ok := m["path"]; !ok {
			return errors.New(`missing required property "path"`)
		}
		return nil
	default:
		return fmt.Errorf("unknown tool %q", name)
	}
}

func TestAccumulatorFinish(t *testing.T) {
	t.Parallel()
	usage := Event{Kind: EventUsage, Usage: Usage{InputTokens: 12, OutputTokens: 3}}
	tests := []struct {
		name    string
		events  []Event
		want    Output
		outcome Outcome // set when Finish must fail
		phase   Phase
		msg     string // substring of the failure message
	}{
		{
			name:   "text answer",
			events: []Event{evText("Hel"), evText("lo"), evFinish("stop"), usage},
			want:   Output{Text: "Hello", FinishReason: "stop", Usage: Usage{InputTokens: 12, OutputTokens: 3}},
		},
		{
			name: "tool calls reassembled and ordered by index",
			events: []Event{
				evText("Let me look."),
				evCall(1, "call_b", "write", `{"pa`),
				evCall(0, "call_a", "read", ""),
				evCall(1, "", "", `th":"x.go"}`),
				evCall(0, "", "", ""),
				evFinish("tool_calls"),
			},
			want: Output{Text: "Let me look.", FinishReason: "tool_calls", ToolCalls: []ToolCall{
				{ID: "call_a", Name: "read", Arguments: json.RawMessage(`{}`)},
				{ID: "call_b", Name: "write", Arguments: json.RawMessage(`{"path":"x.go"}`)},
			}},
		},
		{
			name:   "repeated id and name on later deltas are fine",
			events: []Event{evCall(0, "c", "read", `{"a":`), evCall(0, "c", "read", `1}`), evFinish("tool_calls")},
			want: Output{FinishReason: "tool_calls", ToolCalls: []ToolCall{
				{ID: "c", Name: "read", Arguments: json.RawMessage(`{"a":1}`)},
			}},
		},
		{
			name:   "length with text only passes",
			events: []Event{evText("partial answer"), evFinish("length")},
			want:   Output{Text: "partial answer", FinishReason: "length"},
		},
		{
			name:    "no finish reason",
			events:  []Event{evText("Hello")},
			outcome: OutcomeInvalid, phase: PhaseStreamPartial, msg: "without a finish reason",
		},
		{
			name:    "nothing at all",
			outcome: OutcomeInvalid, phase: PhaseHeadersReceived, msg: "without a finish reason",
		},
		{
			name:    "empty answer",
			events:  []Event{evText(" \n"), evFinish("stop")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "neither text nor a tool call",
		},
		{
			name:    "content filter",
			events:  []Event{evText("I was about to"), evFinish("content_filter")},
			outcome: OutcomeRejected, phase: PhaseStreamCompleted, msg: "content filter",
		},
		{
			name:    "length cut a tool call",
			events:  []Event{evCall(0, "c", "read", `{"a":1}`), evFinish("length")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "output token limit",
		},
		{
			name:    "unclosed arguments",
			events:  []Event{evCall(0, "c", "write", `{"path":"x`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "not a complete JSON object",
		},
		{
			name:    "arguments not an object",
			events:  []Event{evCall(0, "c", "read", `["a"]`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "not a complete JSON object",
		},
		{
			name:    "trailing garbage after the object",
			events:  []Event{evCall(0, "c", "read", `{}{}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "not a complete JSON object",
		},
		{
			name:    "missing id",
			events:  []Event{evCall(0, "", "read", `{}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "has no id",
		},
		{
			name:    "missing name",
			events:  []Event{evCall(0, "c", "", `{}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "has no tool name",
		},
		{
			name:    "unknown tool",
			events:  []Event{evCall(0, "c", "rm_rf", `{}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: `unknown tool "rm_rf"`,
		},
		{
			name:    "schema violation",
			events:  []Event{evCall(0, "c", "write", `{"body":"x"}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: `missing required property "path"`,
		},
		{
			name:    "two calls merged under one index",
			events:  []Event{evCall(0, "c1", "read", `{}`), evCall(0, "c2", "read", `{}`), evFinish("tool_calls")},
			outcome: OutcomeInvalid, phase: PhaseStreamCompleted, msg: "changed its id",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var acc Accumulator
			for _, ev := range tt.events {
				acc.Add(ev)
			}
			got, err := acc.Finish(validateKnown)
			if tt.outcome == "" {
				if err != nil {
					t.Fatalf("Finish: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Finish =\n%+v\nwant\n%+v", got, tt.want)
				}
				return
			}
			var ae *AttemptError
			if !errors.As(err, &ae) {
				t.Fatalf("Finish error = %v (%T), want *AttemptError", err, err)
			}
			if ae.Outcome != tt.outcome || ae.Phase != tt.phase || !strings.Contains(ae.Message, tt.msg) {
				t.Fatalf("Finish error = {%s %s %q}, want {%s %s ~%q}", ae.Outcome, ae.Phase, ae.Message, tt.outcome, tt.phase, tt.msg)
			}
			if !reflect.DeepEqual(got, Output{}) {
				t.Fatalf("a failed Finish returned output %+v", got)
			}
		})
	}
}

func TestAccumulatorProgress(t *testing.T) {
	t.Parallel()
	var acc Accumulator
	if acc.Events() != 0 || acc.Chars() != 0 || acc.PreviewTail(10) != "" {
		t.Fatal("zero Accumulator is not empty")
	}
	acc.Add(evText("héllo "))
	acc.Add(evCall(0, "c", "read", `{"p":"ü"}`))
	acc.Add(evFinish("tool_calls"))

	if got := acc.Events(); got != 3 {
		t.Errorf("Events = %d, want 3", got)
	}
	if got, want := acc.Chars(), len([]rune("héllo "))+len([]rune(`{"p":"ü"}`)); got != want {
		t.Errorf("Chars = %d, want %d", got, want)
	}
	if got, want := acc.PreviewTail(4), `"ü"}`; got != want {
		t.Errorf("PreviewTail(4) = %q, want %q", got, want)
	}
	if got, want := acc.PreviewTail(1000), "héllo \n[read] {\"p\":\"ü\"}"; got != want {
		t.Errorf("PreviewTail(1000) = %q, want %q", got, want)
	}
	if got := acc.PreviewTail(0); got != "" {
		t.Errorf("PreviewTail(0) = %q", got)
	}
}

func TestAccumulatorPreviewIsBounded(t *testing.T) {
	t.Parallel()
	var acc Accumulator
	chunk := strings.Repeat("é", 333) // 666 bytes: the buffer cut lands mid-rune
	for range 20 {
		acc.Add(evText(chunk))
	}
	if len(acc.preview) > previewKeep {
		t.Fatalf("preview holds %d bytes, bound is %d", len(acc.preview), previewKeep)
	}
	tail := acc.PreviewTail(previewKeep)
	if !strings.HasPrefix(tail, "é") || strings.ContainsRune(tail, '\uFFFD') {
		t.Fatalf("tail split a character: %q…", tail[:8])
	}
	if got := acc.Chars(); got != 20*333 {
		t.Fatalf("Chars = %d, want %d", got, 20*333)
	}
}
