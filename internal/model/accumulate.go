package model

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Output is the complete answer of one attempt, as committed to the
// transcript. Only Accumulator.Finish produces it, and only for a complete,
// valid stream (docs/design.md §4.3).
type Output struct {
	Text         string
	ToolCalls    []ToolCall
	FinishReason string
	Usage        Usage
}

// previewKeep bounds the rolling tail kept for heartbeats, in bytes.
const previewKeep = 4096

// Accumulator assembles one attempt's events into an Output.
//
// Everything it holds is speculative until Finish accepts it: a stream that
// ends early, a tool call whose arguments never close, or a call to an unknown
// tool is rejected as a whole, so half-written tool calls never run.
//
// The zero value is ready to use. An Accumulator is not safe for concurrent
// use: Attempt.Run's loop owns it, feeding events and taking heartbeat
// snapshots from the same goroutine.
type Accumulator struct {
	text     strings.Builder
	calls    map[int]*partialCall
	finish   string
	usage    Usage
	events   int
	chars    int
	preview  []byte
	conflict string // first inconsistency seen in the tool call deltas
}

type partialCall struct {
	index int
	id    string
	name  string
	args  strings.Builder
}

// Add records one event.
func (a *Accumulator) Add(ev Event) {
	a.events++
	switch ev.Kind {
	case EventTextDelta:
		a.text.WriteString(ev.Text)
		a.chars += utf8.RuneCountInString(ev.Text)
		a.appendPreview(ev.Text)
	case EventToolCallDelta:
		a.addToolDelta(ev)
	case EventFinish:
		if ev.FinishReason != "" {
			a.finish = ev.FinishReason
		}
	case EventUsage:
		a.usage = ev.Usage
	}
}

func (a *Accumulator) addToolDelta(ev Event) {
	if a.calls == nil {
		a.calls = make(map[int]*partialCall)
	}
	c, ok := a.calls[ev.ToolIndex]
	if !ok {
		c = &partialCall{index: ev.ToolIndex}
		a.calls[ev.ToolIndex] = c
	}
	// Providers send the id and name on a call's first delta; some repeat them
	// on later ones. A different value under the same index means two calls
	// were merged, which would run the wrong arguments: remember it and refuse
	// the output in Finish.
	switch {
	case ev.ToolCallID == "" || ev.ToolCallID == c.id:
	case c.id == "":
		c.id = ev.ToolCallID
	default:
		a.noteConflict(fmt.Sprintf("tool call %d changed its id from %q to %q mid-stream", c.index, c.id, ev.ToolCallID))
	}
	switch {
	case ev.ToolName == "" || ev.ToolName == c.name:
	case c.name == "":
		c.name = ev.ToolName
		a.appendPreview("\n[" + ev.ToolName + "] ")
	default:
		a.noteConflict(fmt.Sprintf("tool call %d changed its name from %q to %q mid-stream", c.index, c.name, ev.ToolName))
	}
	c.args.WriteString(ev.ArgsDelta)
	a.chars += utf8.RuneCountInString(ev.ArgsDelta)
	a.appendPreview(ev.ArgsDelta)
}

func (a *Accumulator) noteConflict(msg string) {
	if a.conflict == "" {
		a.conflict = msg
	}
}

func (a *Accumulator) appendPreview(s string) {
	a.preview = append(a.preview, s...)
	if over := len(a.preview) - previewKeep; over > 0 {
		a.preview = append(a.preview[:0], a.preview[over:]...)
	}
}

// Events is the number of events added so far.
func (a *Accumulator) Events() int { return a.events }

// Chars is the number of characters (runes) of text and tool arguments
// streamed so far.
func (a *Accumulator) Chars() int { return a.chars }

// PreviewTail returns at most the last n characters the model streamed, text
// and tool arguments interleaved as they arrived, for heartbeats and the UI.
// It never splits a character.
func (a *Accumulator) PreviewTail(n int) string {
	if n <= 0 {
		return ""
	}
	b := a.preview
	// Skip a character the rolling buffer may have cut in half.
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	start := len(b)
	for i := 0; i < n && start > 0; i++ {
		_, size := utf8.DecodeLastRune(b[:start])
		start -= size
	}
	return string(b[start:])
}

// Finish returns the attempt's Output if, and only if, it is complete and
// valid: a finish reason arrived, there is text or at least one tool call,
// and every tool call has an id, a name and arguments that form a JSON object
// which validate accepts (validate checks that the tool exists and that the
// arguments satisfy its schema). Empty arguments mean "{}". Tool calls are
// returned in the model's index order. A nil validate accepts every tool.
//
// Any other ending is an *AttemptError: OutcomeRejected when the provider's
// content filter stopped the answer, OutcomeInvalid otherwise. Its Phase is
// PhaseStreamCompleted when the finish reason arrived (the stream ended, its
// content is unusable); without one the stream cannot have completed.
func (a *Accumulator) Finish(validate func(name string, args json.RawMessage) error) (Output, error) {
	if a.finish == "" {
		phase := PhaseStreamPartial
		if a.events == 0 {
			phase = PhaseHeadersReceived
		}
		return Output{}, invalid(phase, "the stream ended without a finish reason")
	}
	if a.finish == "content_filter" {
		return Output{}, &AttemptError{Outcome: OutcomeRejected, Phase: PhaseStreamCompleted,
			Message: "the provider's content filter stopped the answer"}
	}
	if a.conflict != "" {
		return Output{}, invalid(PhaseStreamCompleted, a.conflict)
	}
	text := a.text.String()
	if strings.TrimSpace(text) == "" && len(a.calls) == 0 {
		return Output{}, invalid(PhaseStreamCompleted, "the model returned neither text nor a tool call")
	}
	if a.finish == "length" && len(a.calls) > 0 {
		return Output{}, invalid(PhaseStreamCompleted, "the model hit its output token limit while writing a tool call")
	}

	partials := make([]*partialCall, 0, len(a.calls))
	for _, c := range a.calls {
		partials = append(partials, c)
	}
	slices.SortFunc(partials, func(x, y *partialCall) int { return cmp.Compare(x.index, y.index) })

	calls := make([]ToolCall, 0, len(partials))
	for _, c := range partials {
		call, err := c.complete(validate)
		if err != nil {
			return Output{}, err
		}
		calls = append(calls, call)
	}
	if len(calls) == 0 {
		calls = nil
	}
	return Output{Text: text, ToolCalls: calls, FinishReason: a.finish, Usage: a.usage}, nil
}

func (c *partialCall) complete(validate func(string, json.RawMessage) error) (ToolCall, error) {
	switch {
	case c.id == "":
		return ToolCall{}, invalid(PhaseStreamCompleted, fmt.Sprintf("tool call %d has no id", c.index))
	case c.name == "":
		return ToolCall{}, invalid(PhaseStreamCompleted, fmt.Sprintf("tool call %d has no tool name", c.index))
	}
	args := bytes.TrimSpace([]byte(c.args.String()))
	if len(args) == 0 {
		args = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if args[0] != '{' || json.Unmarshal(args, &obj) != nil {
		return ToolCall{}, invalid(PhaseStreamCompleted,
			fmt.Sprintf("tool call %d (%s) has arguments that are not a complete JSON object", c.index, c.name))
	}
	if validate != nil {
		if err := validate(c.name, args); err != nil {
			return ToolCall{}, &AttemptError{Outcome: OutcomeInvalid, Phase: PhaseStreamCompleted,
				Message: fmt.Sprintf("tool call %d (%s) is not valid: %v", c.index, c.name, err), Err: err}
		}
	}
	return ToolCall{ID: c.id, Name: c.name, Arguments: json.RawMessage(args)}, nil
}

func invalid(phase Phase, msg string) *AttemptError {
	return &AttemptError{Outcome: OutcomeInvalid, Phase: phase, Message: msg}
}
