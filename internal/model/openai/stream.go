package openai

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/capstanhq/capstan/internal/model"
)

// errClosed is the cancellation cause when the consumer closes the stream.
var errClosed = errors.New("the stream was closed")

// stream adapts the SDK's chunk stream to model.Stream.
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
	sdk      *ssestream.Stream[openai.ChatCompletionChunk]
	status   int
	closed   atomic.Bool

	// Owned by Recv.
	pending  []model.Event
	end      error // io.EOF or the *model.AttemptError every later Recv returns
	finished bool  // a finish reason arrived
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

// Recv implements model.Stream. It returns io.EOF only after the stream ended
// cleanly following a finish reason; every other ending is an
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
			// The SDK closed the body; release the request's context now
			// rather than when the consumer gets round to Close.
			s.cancel(nil)
			continue
		}
		// Any decoded chunk means the body is flowing, even one that carries
		// no event (the role-only opening delta, a keep-alive chunk).
		s.rec.Advance(model.PhaseStreamPartial)
		s.pending = s.events(s.pending[:0], s.sdk.Current())
	}
}

// events maps one chunk onto model events, in the order a consumer needs
// them: text, tool call fragments, then the finish reason, then usage.
// Only the first choice is read; capstan never asks for more than one.
func (s *stream) events(dst []model.Event, c openai.ChatCompletionChunk) []model.Event {
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if d.Content != "" {
			dst = append(dst, model.Event{Kind: model.EventTextDelta, Text: d.Content})
		}
		// A refusal is the model's answer in words; carrying it as text lets
		// the turn end with the reason instead of retrying an "empty" answer.
		if d.Refusal != "" {
			dst = append(dst, model.Event{Kind: model.EventTextDelta, Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			dst = append(dst, model.Event{
				Kind:       model.EventToolCallDelta,
				ToolIndex:  int(tc.Index),
				ToolCallID: tc.ID,
				ToolName:   tc.Function.Name,
				ArgsDelta:  tc.Function.Arguments,
			})
		}
		if ch.FinishReason != "" {
			s.finished = true
			dst = append(dst, model.Event{Kind: model.EventFinish, FinishReason: ch.FinishReason})
		}
	}
	// With include_usage, every chunk but the last carries "usage": null.
	if c.JSON.Usage.Valid() {
		dst = append(dst, model.Event{Kind: model.EventUsage, Usage: model.Usage{
			InputTokens:  c.Usage.PromptTokens,
			OutputTokens: c.Usage.CompletionTokens,
		}})
	}
	return dst
}

// ending turns the SDK stream's final state into Recv's terminal result.
func (s *stream) ending(err error) error {
	phase := s.rec.Phase()
	attempt := func(o model.Outcome, msg string, err error) *model.AttemptError {
		return &model.AttemptError{Outcome: o, Phase: phase, HTTPStatus: s.status,
			Message: s.provider.redact(msg), Err: err}
	}
	var se *ssestream.StreamError
	switch {
	case s.closed.Load():
		return attempt(model.OutcomeCancelled, errClosed.Error(), errClosed)
	case s.ctx.Err() != nil:
		cause := context.Cause(s.ctx)
		return attempt(model.OutcomeCancelled, "the request was cancelled: "+cause.Error(), cause)
	case err == nil && s.finished:
		// "data: [DONE]", or a clean end of body after the finish reason.
		s.rec.Advance(model.PhaseStreamCompleted)
		return io.EOF
	case err == nil:
		return attempt(model.OutcomeInvalid, "the stream ended without a finish reason", nil)
	case errors.As(err, &se):
		outcome, msg := classifyEvent(se.Event.Data)
		return attempt(outcome, msg, err)
	case isDecodeError(err):
		return attempt(model.OutcomeInvalid, "the provider sent a malformed stream chunk: "+err.Error(), err)
	default:
		// Reset, EOF inside a chunk, a dropped proxy: the server may or may
		// not have finished, and the answer is incomplete either way.
		return attempt(model.OutcomeUnknown, "the connection failed mid-stream: "+err.Error(), err)
	}
}
