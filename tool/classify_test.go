package tool_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/transporttest"
	"github.com/capstanhq/capstan/tool"
)

// get makes one plain net/http request, as any HTTP client library does
// underneath, and returns its error.
func get(ctx context.Context, t *testing.T, hc *http.Client, target string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestClassifyTransportFailures(t *testing.T) {
	ctx := context.Background()

	t.Run("dial refused is not sent", func(t *testing.T) {
		if err := get(ctx, t, &http.Client{}, "http://"+transporttest.RefusedAddr(t)+"/"); tool.Classify(err) != tool.VerdictNotSent {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("timeout after sending is unknown", func(t *testing.T) {
		base, _ := transporttest.HangingServer(t)
		err := get(ctx, t, &http.Client{Timeout: 50 * time.Millisecond}, base)
		if got := tool.Classify(err); got != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q, want unknown: a timeout is never failed", err, got)
		}
	})

	t.Run("context deadline is unknown", func(t *testing.T) {
		base, _ := transporttest.HangingServer(t)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := get(dctx, t, &http.Client{}, base); tool.Classify(err) != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("connection dropped after the request is unknown", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		t.Cleanup(srv.Close)
		if err := get(ctx, t, &http.Client{}, srv.URL); tool.Classify(err) != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("cancelled in flight", func(t *testing.T) {
		base, entered := transporttest.HangingServer(t)
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- get(cctx, t, &http.Client{}, base) }()
		<-entered
		cancel()
		if err := <-errc; tool.Classify(err) != tool.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("cancelled before sending", func(t *testing.T) {
		base, _ := transporttest.HangingServer(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := get(cctx, t, &http.Client{}, base); tool.Classify(err) != tool.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("untrusted certificate is not sent", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
		srv.StartTLS()
		t.Cleanup(srv.Close)
		if err := get(ctx, t, &http.Client{}, srv.URL); tool.Classify(err) != tool.VerdictNotSent {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})

	t.Run("plain HTTP server behind https is not sent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = bufio.NewReader(conn).Peek(1) // wait for the ClientHello
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		}()
		if err := get(ctx, t, &http.Client{}, "https://"+ln.Addr().String()+"/"); tool.Classify(err) != tool.VerdictNotSent {
			t.Errorf("Classify(%v) = %q", err, tool.Classify(err))
		}
	})
}

func TestClassifyConstructedErrors(t *testing.T) {
	dnsErr := &url.Error{Op: "Get", URL: "https://nowhere.invalid/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}}
	for _, tc := range []struct {
		err  error
		want tool.Verdict
	}{
		{nil, ""},
		{dnsErr, tool.VerdictNotSent},
		{&net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}, tool.VerdictNotSent},
		{fmt.Errorf("wrapped: %w", context.Canceled), tool.VerdictCancelled},
		{context.DeadlineExceeded, tool.VerdictUnknown},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, tool.VerdictUnknown},
		{fmt.Errorf("x: %w", tool.ErrInvalidArguments), tool.VerdictFailed},
		{fmt.Errorf("x: %w", tool.ErrUnknownTool), tool.VerdictFailed},
		{fmt.Errorf("x: %w", tool.ErrRefused), tool.VerdictFailed},
		{fmt.Errorf("x: %w: 409", tool.ErrChangedSinceRead), tool.VerdictFailed},
		{fmt.Errorf("x: %w", &tool.RetryAfterError{Wait: time.Minute, Err: errors.New("429 Too Many Requests")}), tool.VerdictNotSent},
		{errors.New("something odd"), tool.VerdictUnknown},
	} {
		if got := tool.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A tool's own verdict wins over the transport rules, survives wrapping, and
// leaves the error's message and chain as they were.
func TestClassifyWithVerdict(t *testing.T) {
	if tool.WithVerdict(nil, tool.VerdictFailed) != nil {
		t.Error("WithVerdict(nil) is not nil")
	}
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")} // not_sent by itself
	marked := tool.WithVerdict(cause, tool.VerdictUnknown)
	var op *net.OpError
	if marked.Error() != cause.Error() || !errors.As(marked, &op) || op != cause {
		t.Errorf("marked error %q lost its message or chain", marked)
	}
	for _, err := range []error{marked, fmt.Errorf("github_comment: %w", marked)} {
		if got := tool.Classify(err); got != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q, want the marked unknown", err, got)
		}
	}
	if got := tool.Classify(tool.WithVerdict(errors.New("422 Validation Failed"), tool.VerdictFailed)); got != tool.VerdictFailed {
		t.Errorf("marked refusal classifies as %q", got)
	}
}

// A rate limit's wait travels with the error, through any wrapping.
func TestRetryAfterTravelsWithTheError(t *testing.T) {
	cause := errors.New("403 You have exceeded a secondary rate limit")
	err := fmt.Errorf("github_create_pull_request: %w", &tool.RetryAfterError{Wait: 37 * time.Second, Err: cause})
	if wait, ok := tool.RetryAfter(err); !ok || wait != 37*time.Second || !errors.Is(err, cause) {
		t.Errorf("RetryAfter(%v) = %s, %v; want 37s, with the cause kept", err, wait, ok)
	}
	if _, ok := tool.RetryAfter(cause); ok {
		t.Error("an error without a wait reports one")
	}
}
