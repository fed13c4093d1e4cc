package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Attempt is one model attempt (docs/design.md §4.1–4.3): one request, sent
// once, its answer streamed under the attempt's watchdogs, and its ending
// classified into an Outcome. What the attempt means to a task — the
// breaker it goes through, the ledger it commits to, the heartbeats its
// activity records — is the caller's, reached through the hooks.
//
// The watchdogs are:
//   - connect: dialling and the TLS handshake, bounded by the provider's
//     HTTP client (NewHTTPClient); a failure there sent nothing (not_sent);
//   - first event: Limits.FirstEvent from the moment the request starts,
//     so a server that takes the request and never answers is cut like a
//     silent stream (cut_idle);
//   - idle: Limits.Idle between two events (cut_idle);
//   - total: Limits.Total for the whole attempt (cut_total).
//
// The hooks, when set, are called on Run's goroutine, one at a time and
// never after Run returns, so they may share state with the caller without
// locks; they must be quick, as the watchdogs wait meanwhile.
type Attempt struct {
	Provider Provider
	// Request is what the attempt sends. Run sets its Recorder, when nil,
	// to one of its own.
	Request Request
	// Limits are the watchdogs; zero fields take the defaults
	// (Limits.WithDefaults).
	Limits Limits
	// Validate accepts or refuses each tool call of a complete output
	// (Accumulator.Finish); nil accepts every tool.
	Validate func(name string, args json.RawMessage) error
	// Clock starts the watchdogs' and the heartbeat's timers; nil is
	// RealClock.
	Clock Clock

	// Opened is called once the provider began to answer (the stream
	// opened: response headers arrived), if it did.
	Opened func()
	// Received is called with each event as it arrives.
	Received func(Event)
	// Heartbeat is called every Limits.HeartbeatInterval with how far the
	// attempt got, whatever the stream does meanwhile.
	Heartbeat func(Progress)
	// FirstHeartbeat, when positive and shorter than
	// Limits.HeartbeatInterval, also calls Heartbeat once this long into
	// the attempt, so an attempt that runs makes itself known before its
	// first interval; one that ends sooner calls Heartbeat not at all.
	FirstHeartbeat time.Duration
}

// Progress is how far an attempt got: its transport phase and what it
// received.
type Progress struct {
	Phase  Phase
	Events int
	Chars  int
	// PreviewTail is the last ProgressPreview characters streamed.
	PreviewTail string
}

// ProgressPreview is how many of the last characters streamed a Progress
// shows.
const ProgressPreview = 80

// Run sends the request and streams the answer until it ends, a watchdog
// cuts it, or ctx ends. It returns the attempt's Output only when the answer
// is complete and valid (Accumulator.Finish); every other ending is an
// *AttemptError — the provider's, a watchdog's, a cancellation's, or
// OutcomeUnknown for an error no one classified. Either way, the Progress
// says how far the attempt got when it ended. A cut or cancelled attempt
// closes its request; nothing of it is kept.
func (a *Attempt) Run(ctx context.Context) (Output, Progress, error) {
	limits := a.Limits.WithDefaults()
	clock := a.Clock
	if clock == nil {
		clock = RealClock
	}
	req := a.Request
	if req.Recorder == nil {
		req.Recorder = new(PhaseRecorder)
	}
	r := &attemptRun{a: a, limits: limits, transport: req.Recorder,
		opened: make(chan Stream, 1), events: make(chan Event), done: make(chan error, 1)}
	attemptCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The watchdogs start before the request is sent: a server that takes
	// the request and never answers is cut like a silent stream.
	idle := clock.NewTimer(limits.FirstEvent)
	defer idle.Stop()
	total := clock.NewTimer(limits.Total)
	defer total.Stop()
	heartbeat := clock.NewTicker(limits.HeartbeatInterval())
	defer heartbeat.Stop()
	w := watchdogs{idle: idle, total: total, heartbeat: heartbeat}
	if a.FirstHeartbeat > 0 && a.FirstHeartbeat < limits.HeartbeatInterval() {
		w.first = clock.NewTimer(a.FirstHeartbeat)
		defer w.first.Stop()
	}
	go r.receive(attemptCtx, req)

	err := r.wait(ctx, cancel, w)
	if !errors.Is(err, io.EOF) {
		return Output{}, r.progress(), r.classify(err)
	}
	out, err := r.acc.Finish(a.Validate)
	if err != nil {
		return Output{}, r.progress(), r.classify(err)
	}
	return out, r.progress(), nil
}

// attemptRun is the state of one Run. The receive goroutine owns the
// stream's Recv; everything else is Run's goroutine's.
type attemptRun struct {
	a      *Attempt
	limits Limits
	acc    Accumulator
	// transport records how far the request got, written by the
	// provider's transport hooks; read until the stream opens.
	transport *PhaseRecorder
	stream    Stream

	opened chan Stream
	events chan Event
	done   chan error // the receive goroutine's last word: io.EOF or why the stream ended
}

// watchdogs are the timers Run waits on besides the stream; first, the
// FirstHeartbeat timer, may be nil.
type watchdogs struct{ idle, total, heartbeat, first Timer }

// receive sends the request and passes the stream on: the stream once open,
// then each event, then how it ended. It stops forwarding when ctx ends.
func (r *attemptRun) receive(ctx context.Context, req Request) {
	stream, err := r.a.Provider.Stream(ctx, req)
	if err != nil {
		r.done <- err
		return
	}
	defer stream.Close()
	r.opened <- stream
	for {
		ev, err := stream.Recv()
		if err != nil {
			r.done <- err
			return
		}
		select {
		case r.events <- ev:
		case <-ctx.Done():
			r.done <- context.Cause(ctx)
			return
		}
	}
}

// wait runs the attempt's loop until the stream ends (its ending is
// returned: io.EOF when clean), a watchdog cuts it, or ctx ends; a cut or
// a cancellation cancels the request with its reason.
func (r *attemptRun) wait(ctx context.Context, cancel context.CancelCauseFunc, w watchdogs) error {
	var first <-chan time.Time
	if w.first != nil {
		first = w.first.C()
	}
	for {
		select {
		case s := <-r.opened:
			r.open(s)
		case ev := <-r.events:
			r.acc.Add(ev)
			if r.a.Received != nil {
				r.a.Received(ev)
			}
			w.idle.Reset(r.limits.Idle)
		case err := <-r.done:
			select { // the stream may have opened and ended between two selects
			case s := <-r.opened:
				r.open(s)
			default:
			}
			return err
		case <-first:
			first = nil // once
			if r.a.Heartbeat != nil {
				r.a.Heartbeat(r.progress())
			}
		case <-w.heartbeat.C():
			if r.a.Heartbeat != nil {
				r.a.Heartbeat(r.progress())
			}
		case <-w.idle.C():
			return r.cut(cancel, OutcomeCutIdle, fmt.Sprintf("the stream was silent for %s", r.idleLimit()))
		case <-w.total.C():
			return r.cut(cancel, OutcomeCutTotal, fmt.Sprintf("the attempt ran past its total limit of %s", r.limits.Total))
		case <-ctx.Done():
			cancel(ctx.Err())
			return &AttemptError{Outcome: OutcomeCancelled, Phase: r.phase(), Message: "the attempt was cancelled", Err: ctx.Err()}
		}
	}
}

// open records the opened stream and tells the caller.
func (r *attemptRun) open(s Stream) {
	r.stream = s
	if r.a.Opened != nil {
		r.a.Opened()
	}
}

// cut ends the attempt by a watchdog: the request is cancelled with the
// cut as its cause.
func (r *attemptRun) cut(cancel context.CancelCauseFunc, o Outcome, msg string) error {
	cut := &AttemptError{Outcome: o, Phase: r.phase(), Message: msg}
	cancel(cut)
	return cut
}

// idleLimit is the silence the idle watchdog allowed: the first-event wait
// until an event came, the idle timeout after.
func (r *attemptRun) idleLimit() time.Duration {
	if r.acc.Events() == 0 {
		return r.limits.FirstEvent
	}
	return r.limits.Idle
}

// phase is how far the attempt got: the transport's record until the
// stream opened (NOT_SENT or SENT_NO_HEADERS), the stream's after.
func (r *attemptRun) phase() Phase {
	if r.stream == nil {
		return r.transport.Phase()
	}
	return r.stream.Phase()
}

func (r *attemptRun) progress() Progress {
	return Progress{Phase: r.phase(), Events: r.acc.Events(), Chars: r.acc.Chars(), PreviewTail: r.acc.PreviewTail(ProgressPreview)}
}

// classify makes err an *AttemptError: a provider's, a watchdog's or
// Finish's as it is; any other (which no provider should return) is
// OutcomeUnknown at the phase reached — the request may have been seen.
func (r *attemptRun) classify(err error) *AttemptError {
	var ae *AttemptError
	if errors.As(err, &ae) {
		return ae
	}
	return &AttemptError{Outcome: OutcomeUnknown, Phase: r.phase(), Message: err.Error(), Err: err}
}
