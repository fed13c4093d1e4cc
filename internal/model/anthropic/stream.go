package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/capstanhq/capstan/internal/model"
)

// errClosed is the cancellation cause when the consumer closes the stream.
var errClosed = errors.New("the stream was closed")

// stream adapts the SDK's event stream to model.Stream.
//
// Recv must be called from one goroutine at a time. Phase and Close may be
// called from any goroutine, concurrently with a blocked Recv: Close cancels
// the request's context and closes the body, which unblocks Recv with a
// cancelled outcome.
type stream struct {
	provider *Provider
	ctx      context.Context
	cancel   context.CancelCauseFunc
	rec      *model.PhaseRecorder
	sdk      *ssestream.Stream[anthropic.MessageStreamEventUnion]
	status   int
	closed   atomic.Bool

	// Owned by Recv.
	pending  []model.Event
	end      error          // io.EOF or the *model.AttemptError every later Recv returns
	toolUses map[int64]bool // content block indexes that are tool_use blocks
	finish   string         // the stop reason, in model vocabulary, once message_delta gave it
	usage    model.Usage
	gotUsage bool
}

// Phase implements model.Stream.
func (s *stream) Phase() model.Phase { return s.rec.Phase() }

// Close implements model.Stream. It is idempotent.
func (s *stream) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel(errClosed)
	return s.sdk.Close()
}

// Recv implements model.Stream. It returns io.EOF only after message_stop
// ended a message that had a stop reason; every other ending is an
// *model.AttemptError, returned again by any later call.
func (s *stream) Recv() (model.Event, error) {
	for {
		if len(s.pending) > 0 {
			ev := s.pending[0]
			s.pending = s.pending[1:]
			return ev, nil
		}
		if s.end != nil {
			return model.Event{}, s.end
		}
		if !s.sdk.Next() {
			s.end = s.ending(s.sdk.Err())
			if ae, ok := s.end.(*model.AttemptError); ok {
				s.provider.logFailure(s.ctx, ae)
			}
			// The SDK stopped reading; release the request's context now
			// rather than when the consumer gets round to Close.
			s.cancel(nil)
			continue
		}
		// Any decoded event means the body is flowing, even one that carries
		// no model event (message_start, content_block_stop).
		s.rec.Advance(model.PhaseStreamPartial)
		s.pending = s.events(s.pending[:0], s.sdk.Current())
		if s.end != nil {
			// message_stop or an error object: the message is over. Nothing
			// may follow message_stop, so the stream ends here rather than
			// waiting for the server to close the body.
			s.cancel(nil)
		}
	}
}

// events maps one Anthropic stream event onto model events. It sets s.end
// when the event ends the stream.
//
// A tool_use block becomes one tool call whose index is the block's index:
// its start carries the id and name, its input_json_delta fragments the
// arguments. The finish reason and usage wait for message_stop, so that a
// stream cut between message_delta and message_stop shows no finish.
// Thinking, signatures, citations and server tool blocks are not part of the
// answer capstan commits, and event types this package does not know are
// skipped, as Anthropic asks of clients (new types may be added).
func (s *stream) events(dst []model.Event, ev anthropic.MessageStreamEventUnion) []model.Event {
	switch ev.Type {
	case "message_start":
		if ev.Message.JSON.Usage.Valid() {
			s.usage = model.Usage{InputTokens: ev.Message.Usage.InputTokens, OutputTokens: ev.Message.Usage.OutputTokens}
			s.gotUsage = true
		}
	case "content_block_start":
		cb := ev.ContentBlock
		switch cb.Type {
		case "text":
			if cb.Text != "" {
				dst = append(dst, model.Event{Kind: model.EventTextDelta, Text: cb.Text})
			}
		case "tool_use":
			if s.toolUses == nil {
				s.toolUses = make(map[int64]bool)
			}
			s.toolUses[ev.Index] = true
			dst = append(dst, model.Event{Kind: model.EventToolCallDelta, ToolIndex: int(ev.Index),
				ToolCallID: cb.ID, ToolName: cb.Name, ArgsDelta: startInput(cb.JSON.Input.Raw())})
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text != "" {
				dst = append(dst, model.Event{Kind: model.EventTextDelta, Text: ev.Delta.Text})
			}
		case "input_json_delta":
			if s.toolUses[ev.Index] && ev.Delta.PartialJSON != "" {
				dst = append(dst, model.Event{Kind: model.EventToolCallDelta, ToolIndex: int(ev.Index),
					ArgsDelta: ev.Delta.PartialJSON})
			}
		}
	case "message_delta":
		if r := ev.Delta.StopReason; r != "" {
			s.finish = finishReason(r)
		}
		if ev.JSON.Usage.Valid() {
			// message_delta's counts are cumulative; its input count, when
			// present, supersedes message_start's.
			if ev.Usage.JSON.InputTokens.Valid() && ev.Usage.InputTokens > 0 {
				s.usage.InputTokens = ev.Usage.InputTokens
			}
			if ev.Usage.JSON.OutputTokens.Valid() {
				s.usage.OutputTokens = ev.Usage.OutputTokens
			}
			s.gotUsage = true
		}
	case "message_stop":
		if s.finish == "" {
			s.end = s.attempt(model.OutcomeInvalid, "the message ended without a stop reason", nil)
			return dst
		}
		dst = append(dst, model.Event{Kind: model.EventFinish, FinishReason: s.finish})
		if s.gotUsage {
			dst = append(dst, model.Event{Kind: model.EventUsage, Usage: s.usage})
		}
		s.rec.Advance(model.PhaseStreamCompleted)
		s.end = io.EOF
	}
	return dst
}

// startInput is the input a tool_use block starts with. The API always
// starts with {} and streams the arguments as input_json_delta fragments;
// a server that sends the whole input here instead still has it counted.
func startInput(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "null" {
		return ""
	}
	var compact bytes.Buffer
	if json.Compact(&compact, []byte(raw)) == nil && compact.String() == "{}" {
		return ""
	}
	return raw
}

// finishReason maps Anthropic's stop reasons onto the finish reasons the
// turn guard knows (OpenAI's): the answer is complete, wants its tool calls
// run, was cut by a limit, or was refused. pause_turn (a server tool paused
// a long turn) means an answer that is not finished, like a token limit.
// A reason this package does not know passes through unchanged.
func finishReason(r anthropic.StopReason) string {
	switch r {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		return "stop"
	case anthropic.StopReasonToolUse:
		return "tool_calls"
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded, anthropic.StopReasonPauseTurn:
		return "length"
	case anthropic.StopReasonRefusal:
		return "content_filter"
	default:
		return string(r)
	}
}

func (s *stream) attempt(o model.Outcome, msg string, err error) *model.AttemptError {
	return &model.AttemptError{Outcome: o, Phase: s.rec.Phase(), HTTPStatus: s.status,
		Message: s.provider.redact(msg), Err: s.provider.redactErr(err)}
}

// ending turns the SDK stream's final state into Recv's terminal result,
// for a stream that stopped before message_stop.
func (s *stream) ending(err error) error {
	var apiErr *anthropic.Error
	switch {
	case s.closed.Load():
		return s.attempt(model.OutcomeCancelled, errClosed.Error(), errClosed)
	case s.ctx.Err() != nil:
		cause := context.Cause(s.ctx)
		return s.attempt(model.OutcomeCancelled, "the request was cancelled: "+cause.Error(), cause)
	case err == nil:
		// The body ended cleanly, but the message never did.
		return s.attempt(model.OutcomeInvalid, "the stream ended before message_stop", nil)
	case errors.As(err, &apiErr):
		// An "event: error" inside the 200 stream (docs/design.md §4.5).
		outcome, msg := classifyEvent(string(apiErr.Type()), apiErr.Message, []byte(apiErr.RawJSON()))
		return s.attempt(outcome, msg, scrubbed(apiErr))
	case strings.HasPrefix(err.Error(), "received error while streaming"):
		// An error event the SDK could not read as an error object.
		return s.attempt(model.OutcomeInvalid, "the provider sent an unreadable error event mid-stream", err)
	case isDecodeError(err):
		return s.attempt(model.OutcomeInvalid, "the provider sent a malformed stream event: "+err.Error(), err)
	default:
		// Reset, EOF inside an event, a dropped proxy: the server may or may
		// not have finished, and the answer is incomplete either way.
		return s.attempt(model.OutcomeUnknown, "the connection failed mid-stream: "+err.Error(), err)
	}
}
