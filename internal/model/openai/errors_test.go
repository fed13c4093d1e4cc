package openai

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
		{name: "429 retry-after-ms", status: 429, header: http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}},
			body:    `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`,
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond},
			msg: "Rate limit reached for requests"},
		{name: "429 Retry-After seconds", status: 429, header: http.Header{"Retry-After": {"7"}},
			body:    `{"error":{"message":"Rate limit reached. Add a payment method at https://platform.openai.com/account/billing","type":"requests","code":"rate_limit_exceeded"}}`,
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{7 * time.Second, 7 * time.Second}},
		{name: "503 Retry-After date", status: 503, header: http.Header{"Retry-After": {retryDate}},
			body:    `{"error":{"message":"Service unavailable","type":"server_error"}}`,
			outcome: model.OutcomeOverloaded, retryAfter: [2]time.Duration{80 * time.Second, 90 * time.Second}},
		{name: "529 overloaded", status: 529, body: `{"error":{"message":"Overloaded","type":"overloaded_error"}}`,
			outcome: model.OutcomeOverloaded, msg: "Overloaded"},
		{name: "500", status: 500, body: `{"error":{"message":"The server had an error","type":"server_error"}}`,
			outcome: model.OutcomeOverloaded, msg: "The server had an error"},
		{name: "502 from a proxy, not JSON", status: 502, body: "<html><body>Bad Gateway</body></html>",
			outcome: model.OutcomeOverloaded, msg: "HTTP 502 Bad Gateway"},
		{name: "401 echoing the key", status: 401,
			body:    `{"error":{"message":"Incorrect API key provided: ` + testKey + `.","type":"invalid_request_error","code":"invalid_api_key"}}`,
			outcome: model.OutcomeRejected, msg: "Incorrect API key provided: [redacted]."},
		{name: "400 context_length_exceeded", status: 400,
			body:    `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`,
			outcome: model.OutcomeOverflow, msg: "maximum context length"},
		{name: "413 prompt is too long", status: 413, body: `{"error":{"message":"prompt is too long: 210000 tokens"}}`,
			outcome: model.OutcomeOverflow},
		{name: "400 other", status: 400, body: `{"error":{"message":"Invalid value for 'model'","type":"invalid_request_error"}}`,
			outcome: model.OutcomeRejected, msg: "Invalid value for 'model'"},
		{name: "429 insufficient_quota", status: 429, header: http.Header{"Retry-After": {"1"}},
			body:    `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}}`,
			outcome: model.OutcomeRejected, retryAfter: [2]time.Duration{time.Second, time.Second}},
		{name: "404", status: 404, body: `{"error":{"message":"The model does not exist","code":"model_not_found"}}`,
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
	tests := []struct {
		name    string
		before  []string
		event   string
		outcome model.Outcome
		phase   model.Phase
		msg     string
	}{
		{name: "server error after text", before: []string{textChunk("Hal")},
			event:   `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`,
			outcome: model.OutcomeOverloaded, phase: model.PhaseStreamPartial,
			msg: "The server had an error while processing your request."},
		{name: "rate limit", before: []string{textChunk("Hal")},
			event:   `{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit_exceeded"}}`,
			outcome: model.OutcomeOverloaded, phase: model.PhaseStreamPartial, msg: "slow down"},
		{name: "context length as the first event",
			event:   `{"error":{"message":"context too big","code":"context_length_exceeded"}}`,
			outcome: model.OutcomeOverflow, phase: model.PhaseHeadersReceived, msg: "context too big"},
		{name: "unrecognised", before: []string{textChunk("Hal")},
			event:   `{"error":{"message":"something odd","type":"weird"}}`,
			outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial, msg: "something odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, append(tt.before, tt.event)...)
			})
			s, err := api.provider().Stream(context.Background(), simpleRequest)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			evs, err := drain(t, s)
			if len(evs) != len(tt.before) {
				t.Fatalf("got %d events before the error, want %d", len(evs), len(tt.before))
			}
			ae := asAttempt(t, err)
			if ae.Outcome != tt.outcome || ae.Phase != tt.phase || ae.HTTPStatus != 200 || ae.Message != tt.msg {
				t.Fatalf("got {%s %s %d %q}, want {%s %s 200 %q}", ae.Outcome, ae.Phase, ae.HTTPStatus, ae.Message,
					tt.outcome, tt.phase, tt.msg)
			}
		})
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
			name: "connection dropped after one chunk",
			handle: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, textChunk("Hal"))
				panic(http.ErrAbortHandler) // closes the connection mid-body
			},
			outcome: model.OutcomeUnknown, phase: model.PhaseStreamPartial,
		},
		{
			name:    "clean end without a finish reason",
			handle:  func(w http.ResponseWriter, r *http.Request) { writeSSE(w, textChunk("Hal"), "[DONE]") },
			outcome: model.OutcomeInvalid, phase: model.PhaseStreamPartial,
		},
		{
			name:    "malformed chunk",
			handle:  func(w http.ResponseWriter, r *http.Request) { writeSSE(w, textChunk("Hal"), `{"choices":[{`) },
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
			_, err = drain(t, s)
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

	p := New(Config{BaseURL: "http://" + addr + "/v1", APIKey: testKey})
	_, err = p.Stream(context.Background(), simpleRequest)
	ae := asAttempt(t, err)
	if ae.Outcome != model.OutcomeNotSent || ae.Phase != model.PhaseNotSent || ae.HTTPStatus != 0 {
		t.Fatalf("got {%s %s %d}, want {not_sent NOT_SENT 0} (%v)", ae.Outcome, ae.Phase, ae.HTTPStatus, ae)
	}
}

func TestCancelBeforeHeaders(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // hold the request until the client gives up
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	go func() {
		s, err := api.provider().Stream(ctx, simpleRequest)
		if err == nil {
			_ = s.Close()
		}
		result <- err
	}()
	<-arrived
	cancel()
	ae := asAttempt(t, <-result)
	if ae.Outcome != model.OutcomeCancelled || ae.Phase != model.PhaseSentNoHeaders {
		t.Fatalf("got {%s %s}, want {cancelled SENT_NO_HEADERS} (%v)", ae.Outcome, ae.Phase, ae)
	}
	if !errors.Is(ae, context.Canceled) {
		t.Fatalf("error does not wrap context.Canceled: %v", ae.Err)
	}
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	cut := errors.New("stream idle for 120s")
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, textChunk("Hal"))
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
