package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/openai"
)

// The tests run model.Attempt against a real OpenAI-compatible server on
// loopback, streaming through the real provider, and fire the watchdogs
// from a fake clock when the stream has reached the point under test: no
// test waits for a timer to run out.

// Limits whose durations tell the fake clock's timers apart.
var testLimits = model.Limits{FirstEvent: 3 * time.Second, Idle: 5 * time.Second, Total: 7 * time.Second, HeartbeatTimeout: 30 * time.Second}

const heartbeatEvery = 10 * time.Second // testLimits.HeartbeatInterval()

// fakeClock hands out timers that fire only when a test fires them. A
// timer is known by the duration it was created with, so a test and the
// attempt get the same one whoever asks first.
type fakeClock struct {
	mu     sync.Mutex
	timers map[time.Duration]*fakeTimer
}

func newFakeClock() *fakeClock { return &fakeClock{timers: map[time.Duration]*fakeTimer{}} }

func (c *fakeClock) NewTimer(d time.Duration) model.Timer  { return c.armed(d) }
func (c *fakeClock) NewTicker(d time.Duration) model.Timer { return c.armed(d) }

// armed is the timer known by d, armed with d.
func (c *fakeClock) armed(d time.Duration) *fakeTimer {
	t := c.timer(d)
	t.Reset(d)
	return t
}

func (c *fakeClock) timer(d time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.timers[d]
	if !ok {
		t = &fakeTimer{c: make(chan time.Time)}
		c.timers[d] = t
	}
	return t
}

// fakeTimer records every duration it was armed with: the one it was
// created with, then each Reset.
type fakeTimer struct {
	c   chan time.Time // unbuffered: a firing is handed over, never queued
	mu  sync.Mutex
	set []time.Duration
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop()               {}
func (t *fakeTimer) Reset(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.set = append(t.set, d)
}

func (t *fakeTimer) armed() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Duration(nil), t.set...)
}

// run is one attempt under test: its hooks' calls and its ending.
type run struct {
	clock  *fakeClock
	events chan model.Event
	beats  chan model.Progress
	opened chan struct{}
	done   chan struct{}

	out      model.Output
	progress model.Progress
	err      error
}

// start runs an attempt of provider under testLimits and the fake clock.
func start(ctx context.Context, t *testing.T, provider model.Provider, configure ...func(*model.Attempt)) *run {
	t.Helper()
	r := &run{clock: newFakeClock(), events: make(chan model.Event, 100), beats: make(chan model.Progress, 100),
		opened: make(chan struct{}, 100), done: make(chan struct{})}
	a := &model.Attempt{
		Provider:  provider,
		Request:   model.Request{Model: "gpt-test", Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}},
		Limits:    testLimits,
		Clock:     r.clock,
		Opened:    func() { r.opened <- struct{}{} },
		Received:  func(ev model.Event) { r.events <- ev },
		Heartbeat: func(p model.Progress) { r.beats <- p },
	}
	for _, c := range configure {
		c(a)
	}
	go func() {
		defer close(r.done)
		r.out, r.progress, r.err = a.Run(ctx)
	}()
	return r
}

// fire fires the timer armed with d once the attempt takes the firing.
func (r *run) fire(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r.clock.timer(d).c <- time.Now():
	case <-r.done:
		t.Fatalf("the attempt ended (%v) before the %s timer fired", r.err, d)
	}
}

// end waits for the attempt to end.
func (r *run) end(t *testing.T) {
	t.Helper()
	<-r.done
}

// event waits for the attempt's next event.
func (r *run) event(t *testing.T) model.Event {
	t.Helper()
	select {
	case ev := <-r.events:
		return ev
	case <-r.done:
		t.Fatalf("the attempt ended (%v) before the next event", r.err)
		return model.Event{}
	}
}

// attemptError returns the attempt's error as the *model.AttemptError it
// must be.
func (r *run) attemptError(t *testing.T) *model.AttemptError {
	t.Helper()
	var ae *model.AttemptError
	if !errors.As(r.err, &ae) {
		t.Fatalf("err = %v (%T), want a *model.AttemptError", r.err, r.err)
	}
	return ae
}

// server is an OpenAI-compatible chat completions endpoint on loopback.
// arrived is closed when a request came in, gone when its client went away.
type server struct {
	srv     *httptest.Server
	arrived chan struct{}
	gone    chan struct{}
	once    sync.Once
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{arrived: make(chan struct{}), gone: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the whole body first: only then does the server watch the
		// connection, so r.Context() ends when the client goes away.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.once.Do(func() {
			close(s.arrived)
			go func() { <-r.Context().Done(); close(s.gone) }()
		})
		handle(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) provider() model.Provider {
	return openai.New(openai.Config{BaseURL: s.srv.URL + "/v1", APIKey: "sk-test"})
}

// waitGone waits for the client to close the request.
func (s *server) waitGone(t *testing.T) {
	t.Helper()
	<-s.gone
}

// sse writes each payload as one server-sent event and flushes it.
func sse(w http.ResponseWriter, payloads ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, p := range payloads {
		fmt.Fprintf(w, "data: %s\n\n", p)
		w.(http.Flusher).Flush()
	}
}

func chunk(delta map[string]any, finish any) string {
	b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "usage": nil,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	return string(b)
}

func text(s string) string { return chunk(map[string]any{"content": s}, nil) }

func toolCall(id, name, args string) string {
	return chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
		"function": map[string]any{"name": name, "arguments": args}}}}, nil)
}

func finish(reason string) string { return chunk(map[string]any{}, reason) }

func usage(in, out int) string {
	b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}})
	return string(b)
}

var role = chunk(map[string]any{"role": "assistant", "content": ""}, nil)

// silence keeps the request open, sending nothing more, until the client
// goes away.
func silence(r *http.Request) { <-r.Context().Done() }

func TestAttemptReturnsACompleteAnswer(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, role, text("Hel"), text("lo"), finish("stop"), usage(11, 2), "[DONE]")
	})
	r := start(context.Background(), t, s.provider())
	r.end(t)
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	want := model.Output{Text: "Hello", FinishReason: "stop", Usage: model.Usage{InputTokens: 11, OutputTokens: 2}}
	if !reflect.DeepEqual(r.out, want) {
		t.Errorf("output = %+v, want %+v", r.out, want)
	}
	if want := (model.Progress{Phase: model.PhaseStreamCompleted, Events: 4, Chars: 5, PreviewTail: "Hello"}); r.progress != want {
		t.Errorf("progress = %+v, want %+v", r.progress, want)
	}
	if len(r.opened) != 1 {
		t.Errorf("Opened called %d times, want once", len(r.opened))
	}
	var kinds []model.EventKind
	for len(r.events) > 0 {
		kinds = append(kinds, (<-r.events).Kind)
	}
	if want := []model.EventKind{model.EventTextDelta, model.EventTextDelta, model.EventFinish, model.EventUsage}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("Received %v, want %v", kinds, want)
	}
	// The first-event wait, then the idle timeout re-armed by each event.
	idle := testLimits.Idle
	if got, want := r.clock.timer(testLimits.FirstEvent).armed(), []time.Duration{testLimits.FirstEvent, idle, idle, idle, idle}; !reflect.DeepEqual(got, want) {
		t.Errorf("idle watchdog armed with %v, want %v", got, want)
	}
}

// A server that takes the request and never answers is cut by the
// first-event watchdog, which runs from the moment the request starts.
func TestAttemptFirstEventWatchdogCutsAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { silence(r) })
	r := start(context.Background(), t, s.provider())
	<-s.arrived
	r.fire(t, testLimits.FirstEvent)
	r.end(t)
	ae := r.attemptError(t)
	if ae.Outcome != model.OutcomeCutIdle || ae.Phase != model.PhaseSentNoHeaders || ae.Message != "the stream was silent for 3s" {
		t.Errorf("err = %+v, want cut_idle at SENT_NO_HEADERS after the 3s first-event wait", ae)
	}
	if r.progress != (model.Progress{Phase: model.PhaseSentNoHeaders}) {
		t.Errorf("progress = %+v, want SENT_NO_HEADERS and nothing received", r.progress)
	}
	if len(r.opened) != 0 {
		t.Error("Opened was called for a request that got no headers")
	}
	s.waitGone(t) // the cut closed the request
}

// A stream that falls silent after its first events is cut by the idle
// watchdog, and says how far it got.
func TestAttemptIdleWatchdogCutsASilentStream(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, role, text("thinking"))
		silence(r)
	})
	r := start(context.Background(), t, s.provider())
	if ev := r.event(t); ev.Text != "thinking" {
		t.Fatalf("first event = %+v, want the text", ev)
	}
	r.fire(t, testLimits.FirstEvent) // the timer the first event re-armed
	r.end(t)
	ae := r.attemptError(t)
	if ae.Outcome != model.OutcomeCutIdle || ae.Phase != model.PhaseStreamPartial || ae.Message != "the stream was silent for 5s" {
		t.Errorf("err = %+v, want cut_idle at STREAM_PARTIAL after the 5s idle timeout", ae)
	}
	if want := (model.Progress{Phase: model.PhaseStreamPartial, Events: 1, Chars: 8, PreviewTail: "thinking"}); r.progress != want {
		t.Errorf("progress = %+v, want %+v", r.progress, want)
	}
	if len(r.opened) != 1 {
		t.Errorf("Opened called %d times, want once", len(r.opened))
	}
	s.waitGone(t)
}

// The total limit cuts an attempt whatever its stream does.
func TestAttemptTotalWatchdogCutsALongAttempt(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, role, text("still "), text("going"))
		silence(r)
	})
	r := start(context.Background(), t, s.provider())
	r.event(t)
	r.event(t)
	r.fire(t, testLimits.Total)
	r.end(t)
	ae := r.attemptError(t)
	if ae.Outcome != model.OutcomeCutTotal || ae.Phase != model.PhaseStreamPartial || ae.Message != "the attempt ran past its total limit of 7s" {
		t.Errorf("err = %+v, want cut_total at STREAM_PARTIAL", ae)
	}
	if r.progress.Events != 2 || r.progress.PreviewTail != "still going" {
		t.Errorf("progress = %+v, want both events", r.progress)
	}
	s.waitGone(t)
}

// The heartbeat beats on its ticker whether or not the stream moves, with
// how far the attempt got; a cancelled context ends the attempt as
// cancelled and closes the request.
func TestAttemptHeartbeatsAndIsCancelled(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, role, text("abc"))
		silence(r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, t, s.provider())
	r.event(t)
	want := model.Progress{Phase: model.PhaseStreamPartial, Events: 1, Chars: 3, PreviewTail: "abc"}
	for i := range 2 { // the stream is silent: the beats go on
		r.fire(t, heartbeatEvery)
		select {
		case p := <-r.beats:
			if p != want {
				t.Errorf("beat %d = %+v, want %+v", i+1, p, want)
			}
		case <-r.done:
			t.Fatalf("the attempt ended (%v) before beat %d", r.err, i+1)
		}
	}
	cancel()
	r.end(t)
	ae := r.attemptError(t)
	if ae.Outcome != model.OutcomeCancelled || ae.Phase != model.PhaseStreamPartial || !errors.Is(r.err, context.Canceled) {
		t.Errorf("err = %+v, want cancelled at STREAM_PARTIAL, wrapping context.Canceled", ae)
	}
	s.waitGone(t)
}

// The connect watchdog is the provider's HTTP client's: a dial refused, or
// a TLS handshake that never completes within the connect timeout, sent
// nothing.
func TestAttemptConnectFailuresAreNotSent(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		r := start(context.Background(), t, openai.New(openai.Config{BaseURL: "http://" + addr + "/v1"}))
		r.end(t)
		if ae := r.attemptError(t); ae.Outcome != model.OutcomeNotSent || ae.Phase != model.PhaseNotSent {
			t.Errorf("err = %+v, want not_sent at NOT_SENT", ae)
		}
	})
	t.Run("handshake never completes", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept() // and say nothing
			if err == nil {
				accepted <- c
			}
		}()
		r := start(context.Background(), t, openai.New(openai.Config{BaseURL: "https://" + ln.Addr().String() + "/v1",
			ConnectTimeout: 100 * time.Millisecond}))
		c := <-accepted
		defer c.Close()
		r.end(t)
		ae := r.attemptError(t)
		if ae.Outcome != model.OutcomeNotSent || ae.Phase != model.PhaseNotSent || !strings.Contains(ae.Message, "handshake timeout") {
			t.Errorf("err = %+v, want not_sent at NOT_SENT after the TLS handshake timed out", ae)
		}
	})
}

// What the provider says of an attempt is its outcome; an answer that is
// not complete and valid is invalid.
func TestAttemptClassifiesItsEnding(t *testing.T) {
	t.Parallel()
	t.Run("rate limited", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			http.Error(w, `{"error":{"message":"slow down","type":"rate_limit_error"}}`, http.StatusTooManyRequests)
		})
		r := start(context.Background(), t, s.provider())
		r.end(t)
		ae := r.attemptError(t)
		if ae.Outcome != model.OutcomeOverloaded || ae.Phase != model.PhaseHeadersReceived || ae.HTTPStatus != 429 || ae.RetryAfter != 7*time.Second {
			t.Errorf("err = %+v, want overloaded at HEADERS_RECEIVED, HTTP 429, retry after 7s", ae)
		}
	})
	t.Run("no finish reason", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) { sse(w, role, text("half an ans")) })
		r := start(context.Background(), t, s.provider())
		r.end(t)
		if ae := r.attemptError(t); ae.Outcome != model.OutcomeInvalid {
			t.Errorf("err = %+v, want invalid", ae)
		}
		if r.progress.Events != 1 || r.progress.PreviewTail != "half an ans" {
			t.Errorf("progress = %+v, want the event received", r.progress)
		}
	})
	t.Run("a tool call Validate refuses", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			sse(w, role, toolCall("call_1", "github_delete_everything", `{}`), finish("tool_calls"), "[DONE]")
		})
		unknown := errors.New("no such tool")
		r := start(context.Background(), t, s.provider(), func(a *model.Attempt) {
			a.Validate = func(string, json.RawMessage) error { return unknown }
		})
		r.end(t)
		ae := r.attemptError(t)
		if ae.Outcome != model.OutcomeInvalid || ae.Phase != model.PhaseStreamCompleted || !errors.Is(r.err, unknown) {
			t.Errorf("err = %+v, want invalid at STREAM_COMPLETED, wrapping Validate's error", ae)
		}
	})
}

// brokenProvider fails every request with an error no one classified.
type brokenProvider struct{ err error }

func (brokenProvider) Name() string { return "broken" }
func (p brokenProvider) Stream(context.Context, model.Request) (model.Stream, error) {
	return nil, p.err
}

// An error that is not an *AttemptError (a provider breaking its contract)
// is unknown: the request may have been seen.
func TestAttemptUnclassifiedErrorIsUnknown(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := start(context.Background(), t, brokenProvider{boom})
	r.end(t)
	ae := r.attemptError(t)
	if ae.Outcome != model.OutcomeUnknown || ae.Phase != model.PhaseNotSent || ae.Message != "boom" || !errors.Is(r.err, boom) {
		t.Errorf("err = %+v, want unknown at NOT_SENT, wrapping the error", ae)
	}
}

// FirstHeartbeat beats once that long into the attempt, before the
// ticker's first beat, with how far the attempt got.
func TestAttemptFirstHeartbeatComesBeforeTheTicker(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, role, text("abc"))
		silence(r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := start(ctx, t, s.provider(), func(a *model.Attempt) { a.FirstHeartbeat = time.Second })
	r.event(t)
	r.fire(t, time.Second)
	select {
	case p := <-r.beats:
		if want := (model.Progress{Phase: model.PhaseStreamPartial, Events: 1, Chars: 3, PreviewTail: "abc"}); p != want {
			t.Errorf("first beat = %+v, want %+v", p, want)
		}
	case <-r.done:
		t.Fatalf("the attempt ended (%v) before its first beat", r.err)
	}
	cancel()
	r.end(t)
	s.waitGone(t)
}
