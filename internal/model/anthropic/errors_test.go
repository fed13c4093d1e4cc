package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/capstanhq/capstan/internal/model"
)

// asAttempt returns err as an *model.AttemptError, failing the test if it is
// not one or if its text leaks the API key.
func asAttempt(t *testing.T, err error) *model.AttemptError {
	t.Helper()
	var ae *model.AttemptError
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v (%T), want *model.AttemptError", err, err)
	}
	for _, s := range []string{ae.Error(), ae.Message, fmt.Sprintf("%v %+v", ae, ae), fmt.Sprint(ae.Err)} {
		if strings.Contains(s, testKey) {
			t.Fatalf("error text leaks the API key: %q", s)
		}
	}
	t.Logf("attempt error: %v", ae)
	return ae
}

func anthropicError(typ, msg string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_011"}`, typ, msg)
}

func TestHTTPStatusErrors(t *testing.T) {
	t.Parallel()
	retryDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		outcome    model.Outcome
		retryAfter [2]time.Duration // accepted range
		msg        string
	}{
		{name: "429 retry-after-ms wins", status: 429, header: http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}},
			body:    anthropicError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond},
			msg: "per-minute rate limit"},
		{name: "429 Retry-After seconds", status: 429, header: http.Header{"Retry-After": {"7"}},
			body:    anthropicError("rate_limit_error", "rate limited"),
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{7 * time.Second, 7 * time.Second}},
		{name: "529 overloaded", status: 529, body: anthropicError("overloaded_error", "Overloaded"),
			outcome: model.OutcomeOverloaded, msg: "Overloaded"},
		{name: "500 api_error", status: 500, body: anthropicError("api_error", "Internal server error"),
			outcome: model.OutcomeOverloaded, msg: "Internal server error"},
		{name: "502 from a proxy, not JSON", status: 502, body: "<html><body>Bad Gateway</body></html>",
			outcome: model.OutcomeOverloaded, msg: "HTTP 502 Bad Gateway"},
		{name: "503 Retry-After date", status: 503, header: http.Header{"Retry-After": {retryDate}},
			body:    anthropicError("api_error", "Service unavailable"),
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{80 * time.Second, 90 * time.Second}},
		{name: "504 timeout_error", status: 504, body: anthropicError("timeout_error", "Request timed out"),
			outcome: model.OutcomeOverloaded},
		{name: "overloaded_error under another status", status: 400, body: anthropicError("overloaded_error", "Overloaded"),
			outcome: model.OutcomeOverloaded},
		{name: "400 prompt is too long", status: 400,
			body:    anthropicError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
			outcome: model.OutcomeOverflow, msg: "prompt is too long"},
		{name: "400 input and max_tokens exceed the context limit", status: 400,
			body:    anthropicError("invalid_request_error", "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"),
			outcome: model.OutcomeOverflow},
		{name: "400 other", status: 400, body: anthropicError("invalid_request_error", "messages: roles must alternate"),
			outcome: model.OutcomeRejected, msg: "roles must alternate"},
		{name: "401 echoing the key", status: 401,
			body:    anthropicError("authentication_error", "invalid x-api-key: "+testKey),
			outcome: model.OutcomeRejected, msg: "invalid x-api-key: [redacted]"},
		{name: "402 billing", status: 402, body: anthropicError("billing_error", "Your credit balance is too low"),
			outcome: model.OutcomeRejected},
		{name: "403 permission", status: 403, body: anthropicError("permission_error", "no access to this model"),
			outcome: model.OutcomeRejected},
		{name: "404 model", status: 404, body: anthropicError("not_found_error", "model: claude-nope"),
			outcome: model.OutcomeRejected, msg: "model: claude-nope"},
		{name: "413 request too large", status: 413, body: anthropicError("request_too_large", "Request exceeds the maximum allowed number of bytes."),
			outcome: model.OutcomeRejected},
		{name: "422", status: 422, body: anthropicError("invalid_request_error", "unprocessable"),
			outcome: model.OutcomeRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header()[k] = v
				}
				w.Header().Set("Content-Type", "application/json")
				if strings.HasPrefix(tt.body, "<") {
					w.Header().Set("Content-Type", "text/html")
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			})
			s, err := api.provider().Stream(context.Background(), simpleRequest)
			if err == nil {
				_ = s.Close()
				t.Fatal("Stream succeeded, want the HTTP error from Stream itself")
			}
			ae := asAttempt(t, err)
			if ae.Outcome != tt.outcome || ae.Phase != model.PhaseHeadersReceived || ae.HTTPStatus != tt.status {
				t.Fatalf("got {%s %s %d}, want {%s %s %d} (%v)", ae.Outcome, ae.Phase, ae.HTTPStatus,
					tt.outcome, model.PhaseHeadersReceived, tt.status, ae)
			}
			if ae.RetryAfter < tt.retryAfter[0] || ae.RetryAfter > tt.retryAfter[1] {
				t.Fatalf("RetryAfter = %s, want within %s", ae.RetryAfter, tt.retryAfter)
			}
			if !strings.Contains(ae.Message, tt.msg) {
				t.Fatalf("Message = %q, want it to contain %q", ae.Message, tt.msg)
			}
			// The SDK's retries are off: the turn guard must see every attempt.
			if n := api.requests.Load(); n != 1 {
				t.Fatalf("server saw %d requests, want exactly 1", n)
			}
		})
	}
}

func TestMidStreamErrorEvents(t *testing.T) {
	t.Parallel()
	started := []frame{messageStart(10), textStart(0), textDelta(0, "Hal")}
	tests := []struct {
		name    string
		frames  []frame
		events  int // model events before the error
		outcome model.Outcome
		phase   model.Phase
		msg     string
	}{
		{name: "overloaded after text", frames: append(started, errorFrame("overloaded_error", "Overloaded")),
			events: 1, outcome: model.OutcomeOverloaded, phase: model.PhaseStreamPartial, msg: "Overloaded"},
		{name: "rate limit after text", frames: append(started, errorFrame("rate_limit_error", "Rate limited")),
			events: 1, outcome: model.OutcomeOverloaded, phase: model.PhaseStreamPartial, msg: "Rate limited"},
		{name: "api error after text", frames: append(started, errorFrame("api_error", "Internal server error")),
			events: 1, outcome: model.OutcomeOverloaded, phase: model.PhaseStreamPartial, msg: "Internal server error"},
		{name: "prompt too long after message_start",
			frames:  []frame{messageStart(10), errorFrame("invalid_request_error", "prompt is too long: 200001 tokens > 200000 maximum")},
			outcome: model.OutcomeOverflow, phase: model.PhaseStreamPartial, msg: "prompt is too long: 200001 tokens > 200000 maximum"},
		{name: "other invalid request", frames: append(started, errorFrame("invalid_request_error", "bad")),
			events: 1, outcome: model.OutcomeRejected, phase: model.PhaseStreamPartial, msg: "bad"},
		{name: "overloaded as the very first event", frames: []frame{errorFrame("overloaded_error", "Overloaded")},
			outcome: model.OutcomeOverloaded, phase: model.PhaseHeadersReceived, msg: "Overloaded"},
		{name: "unrecognised type", frames: append(started, errorFrame("weird_error", "something odd")),
			events: 1, outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial, msg: "something odd"},
		{name: "error event that is not JSON", frames: append(started, frame{"error", "upstream went away"}),
			events: 1, outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial,
			msg: "the provider sent an error event mid-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, tt.frames...)
				<-r.Context().Done() // the error, not the end of the body, must end the stream
			})
			s, err := api.provider().Stream(context.Background(), simpleRequest)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			evs, err := drain(t, s)
			if len(evs) != tt.events {
				t.Fatalf("got %d events before the error, want %d: %+v", len(evs), tt.events, evs)
			}
			ae := asAttempt(t, err)
			if ae.Outcome != tt.outcome || ae.Phase != tt.phase || ae.HTTPStatus != 200 || ae.Message != tt.msg {
				t.Fatalf("got {%s %s %d %q}, want {%s %s 200 %q}", ae.Outcome, ae.Phase, ae.HTTPStatus, ae.Message,
					tt.outcome, tt.phase, tt.msg)
			}
			if _, again := s.Recv(); again != err {
				t.Fatalf("Recv after the error = %v, want the same error", again)
			}
		})
	}
}

// TestMidStreamErrorKeepsTheSDKError: callers may still inspect the SDK's
// error, without its request (which carries the credential).
func TestMidStreamErrorKeepsTheSDKError(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, messageStart(1), errorFrame("overloaded_error", "Overloaded "+testKey))
	})
	s, err := api.provider().Stream(context.Background(), simpleRequest)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, err = drain(t, s)
	ae := asAttempt(t, err)
	var sdkErr *anthropic.Error
	if !errors.As(ae, &sdkErr) || sdkErr.Type() != "overloaded_error" || sdkErr.Request != nil || sdkErr.Response != nil {
		t.Fatalf("SDK error = %+v, want the overloaded_error without request and response", sdkErr)
	}
}

func TestStreamEndings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handle  http.HandlerFunc
		outcome model.Outcome
		phase   model.Phase
	}{
		{
			name: "connection dropped after text",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "Hal"))
				panic(http.ErrAbortHandler) // closes the connection mid-body
			},
			outcome: model.OutcomeUnknown, phase: model.PhaseStreamPartial,
		},
		{
			name: "clean end of body before message_stop",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "Hal"), blockStop(0), messageDelta("end_turn", 2))
			},
			outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial,
		},
		{
			name: "message_stop without a stop reason",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "Hal"), blockStop(0), messageStop())
			},
			outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial,
		},
		{
			name: "malformed event",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "Hal"),
					frame{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{`})
			},
			outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.handle)
			s, err := api.provider().Stream(context.Background(), simpleRequest)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			evs, err := drain(t, s)
			for _, ev := range evs {
				if ev.Kind == model.EventFinish {
					t.Fatalf("an unfinished stream delivered a finish: %+v", evs)
				}
			}
			ae := asAttempt(t, err)
			if ae.Outcome != tt.outcome || ae.Phase != tt.phase {
				t.Fatalf("got {%s %s} (%v), want {%s %s}", ae.Outcome, ae.Phase, ae, tt.outcome, tt.phase)
			}
			if s.Phase() != tt.phase {
				t.Fatalf("stream phase = %s, want %s", s.Phase(), tt.phase)
			}
			if _, again := s.Recv(); again != err {
				t.Fatalf("Recv after the end = %v, want the same error", again)
			}
		})
	}
}

func TestClosedPortIsNotSent(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()

	rec := new(model.PhaseRecorder)
	req := simpleRequest
	req.Recorder = rec
	p := New(Config{BaseURL: "http://" + addr, APIKey: testKey})
	_, err = p.Stream(context.Background(), req)
	ae := asAttempt(t, err)
	if ae.Outcome != model.OutcomeNotSent || ae.Phase != model.PhaseNotSent || ae.HTTPStatus != 0 {
		t.Fatalf("got {%s %s %d}, want {not_sent NOT_SENT 0} (%v)", ae.Outcome, ae.Phase, ae.HTTPStatus, ae)
	}
	if rec.Phase() != model.PhaseNotSent {
		t.Fatalf("the caller's recorder reads %s, want NOT_SENT", rec.Phase())
	}
}

// TestRecorderBeforeHeaders: while Stream is still waiting for the headers,
// the caller's recorder already says the request was sent, so a watchdog
// that cuts the attempt there reports SENT_NO_HEADERS, not UNKNOWN.
func TestRecorderBeforeHeaders(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // hold the request until the client gives up
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	rec := new(model.PhaseRecorder)
	req := simpleRequest
	req.Recorder = rec
	result := make(chan error, 1)
	go func() {
		s, err := api.provider().Stream(ctx, req)
		if err == nil {
			_ = s.Close()
		}
		result <- err
	}()
	<-arrived
	if got := rec.Phase(); got != model.PhaseSentNoHeaders {
		t.Fatalf("recorder = %s while the server holds the request, want SENT_NO_HEADERS", got)
	}
	cut := errors.New("no first event within 3s")
	cancel(cut)
	ae := asAttempt(t, <-result)
	if ae.Outcome != model.OutcomeCancelled || ae.Phase != model.PhaseSentNoHeaders {
		t.Fatalf("got {%s %s}, want {cancelled SENT_NO_HEADERS} (%v)", ae.Outcome, ae.Phase, ae)
	}
	if !errors.Is(ae, cut) {
		t.Fatalf("error does not carry the cancellation cause: %v", ae.Err)
	}
	if n := api.requests.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want exactly 1", n)
	}
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	cut := errors.New("stream idle for 120s")
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, messageStart(1), textStart(0), textDelta(0, "Hal"))
				<-r.Context().Done()
			})
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			s, err := api.provider().Stream(ctx, simpleRequest)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if ev, err := s.Recv(); err != nil || ev.Text != "Hal" {
				t.Fatalf("first Recv = %+v, %v", ev, err)
			}
			// Recv now blocks on the silent server; stop it from outside,
			// as the activity's watchdog does.
			result := make(chan error, 1)
			go func() {
				_, err := s.Recv()
				result <- err
			}()
			if how == "context" {
				cancel(cut)
			} else if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			ae := asAttempt(t, <-result)
			if ae.Outcome != model.OutcomeCancelled || ae.Phase != model.PhaseStreamPartial {
				t.Fatalf("got {%s %s}, want {cancelled STREAM_PARTIAL} (%v)", ae.Outcome, ae.Phase, ae)
			}
			if how == "context" && !errors.Is(ae, cut) {
				t.Fatalf("error does not carry the cancellation cause: %v", ae)
			}
		})
	}
}

func TestConnectionLostBeforeHeaders(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		// The request arrived in full; drop the connection without a word.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	})
	_, err := api.provider().Stream(context.Background(), simpleRequest)
	ae := asAttempt(t, err)
	if ae.Outcome != model.OutcomeUnknown || ae.Phase != model.PhaseSentNoHeaders {
		t.Fatalf("got {%s %s}, want {unknown SENT_NO_HEADERS} (%v)", ae.Outcome, ae.Phase, ae)
	}
	if n := api.requests.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want exactly 1", n)
	}
}
