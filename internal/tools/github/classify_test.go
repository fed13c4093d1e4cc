package githubtools_test

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

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// listAgainst makes one read through go-github and returns its error.
func listAgainst(ctx context.Context, t *testing.T, c *github.Client) error {
	t.Helper()
	_, _, err := c.PullRequests.List(ctx, "acme", "app", nil)
	return err
}

func clientFor(t *testing.T, baseURL string, hc *http.Client) *github.Client {
	t.Helper()
	c, err := githubtools.NewClient(baseURL, "", hc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// statusServer answers every request with status and a GitHub error body.
func statusServer(t *testing.T, status int, header http.Header) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"message":%q}`, http.StatusText(status))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// hangingServer accepts requests and never answers; entered receives one
// value per request once the request has been read.
func hangingServer(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	entered, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.URL, entered
}

func TestClassifyStatuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		header http.Header
		want   tools.Verdict
	}{
		{http.StatusUnprocessableEntity, nil, tools.VerdictFailed},
		{http.StatusNotFound, nil, tools.VerdictFailed},
		{http.StatusConflict, nil, tools.VerdictFailed},
		{http.StatusUnauthorized, nil, tools.VerdictFailed},
		{http.StatusForbidden, nil, tools.VerdictFailed},
		{http.StatusRequestTimeout, nil, tools.VerdictUnknown},
		{http.StatusTooManyRequests, nil, tools.VerdictUnknown},
		// A rate limit did nothing (see ratelimit_test.go for every form).
		{http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(time.Now().Add(time.Hour).Unix())}}, tools.VerdictNotSent},
		{http.StatusTooManyRequests, http.Header{"Retry-After": {"30"}}, tools.VerdictNotSent},
		{http.StatusInternalServerError, nil, tools.VerdictUnknown},
		{http.StatusBadGateway, nil, tools.VerdictUnknown},
		{http.StatusServiceUnavailable, nil, tools.VerdictUnknown},
	} {
		err := listAgainst(ctx, t, clientFor(t, statusServer(t, tc.status, tc.header), nil))
		if got := githubtools.Classify(err); got != tc.want {
			t.Errorf("%d %v: Classify(%v) = %q, want %q", tc.status, tc.header, err, got, tc.want)
		}
		if got := githubtools.HTTPStatus(err); got != tc.status {
			t.Errorf("%d: HTTPStatus = %d", tc.status, got)
		}
	}
}

func TestClassifyRateLimitGuardIsNotSent(t *testing.T) {
	reset := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	c := clientFor(t, statusServer(t, http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {reset}}), nil)
	if err := listAgainst(context.Background(), t, c); githubtools.Classify(err) != tools.VerdictNotSent || githubtools.HTTPStatus(err) != http.StatusForbidden {
		t.Fatalf("first: %v", err)
	}
	// go-github now refuses locally without sending anything.
	err := listAgainst(context.Background(), t, c)
	if got := githubtools.Classify(err); got != tools.VerdictNotSent || githubtools.HTTPStatus(err) != 0 {
		t.Errorf("guarded: Classify(%v) = %q, status %d", err, got, githubtools.HTTPStatus(err))
	}
}

func TestClassifyTransportFailures(t *testing.T) {
	ctx := context.Background()

	t.Run("dial refused is not sent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		err = listAgainst(ctx, t, clientFor(t, "http://"+addr+"/", nil))
		if got := githubtools.Classify(err); got != tools.VerdictNotSent || githubtools.HTTPStatus(err) != 0 {
			t.Errorf("Classify(%v) = %q", err, got)
		}
	})

	t.Run("timeout after sending is unknown", func(t *testing.T) {
		base, _ := hangingServer(t)
		err := listAgainst(ctx, t, clientFor(t, base, &http.Client{Timeout: 50 * time.Millisecond}))
		if got := githubtools.Classify(err); got != tools.VerdictUnknown {
			t.Errorf("Classify(%v) = %q, want unknown: a timeout is never failed", err, got)
		}
	})

	t.Run("context deadline is unknown", func(t *testing.T) {
		base, _ := hangingServer(t)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err := listAgainst(dctx, t, clientFor(t, base, nil))
		if got := githubtools.Classify(err); got != tools.VerdictUnknown {
			t.Errorf("Classify(%v) = %q", err, got)
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
		err := listAgainst(ctx, t, clientFor(t, srv.URL, nil))
		if got := githubtools.Classify(err); got != tools.VerdictUnknown {
			t.Errorf("Classify(%v) = %q", err, got)
		}
	})

	t.Run("cancelled in flight", func(t *testing.T) {
		base, entered := hangingServer(t)
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- listAgainst(cctx, t, clientFor(t, base, nil)) }()
		<-entered
		cancel()
		if err := <-errc; githubtools.Classify(err) != tools.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, githubtools.Classify(err))
		}
	})

	t.Run("cancelled before sending", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		base, _ := hangingServer(t)
		if err := listAgainst(cctx, t, clientFor(t, base, nil)); githubtools.Classify(err) != tools.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, githubtools.Classify(err))
		}
	})

	t.Run("untrusted certificate is not sent", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
		srv.StartTLS()
		t.Cleanup(srv.Close)
		err := listAgainst(ctx, t, clientFor(t, srv.URL, &http.Client{}))
		if got := githubtools.Classify(err); got != tools.VerdictNotSent {
			t.Errorf("Classify(%v) = %q", err, got)
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
		err = listAgainst(ctx, t, clientFor(t, "https://"+ln.Addr().String()+"/", nil))
		if got := githubtools.Classify(err); got != tools.VerdictNotSent {
			t.Errorf("Classify(%v) = %q", err, got)
		}
	})
}

// GitHub's own errors get GitHub's verdicts; everything else keeps the
// verdict tools.Classify gives it.
func TestClassifyConstructedErrors(t *testing.T) {
	dnsErr := &url.Error{Op: "Get", URL: "https://nowhere.invalid/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}}
	for _, tc := range []struct {
		err  error
		want tools.Verdict
	}{
		{nil, ""},
		{&github.AcceptedError{}, tools.VerdictUnknown},
		{fmt.Errorf("get: %w", github.ErrPathForbidden), tools.VerdictFailed},
		{dnsErr, tools.VerdictNotSent},
		{fmt.Errorf("wrapped: %w", context.Canceled), tools.VerdictCancelled},
		{context.DeadlineExceeded, tools.VerdictUnknown},
		{fmt.Errorf("x: %w", tools.ErrInvalidArguments), tools.VerdictFailed},
		{fmt.Errorf("x: %w", tools.ErrRefused), tools.VerdictFailed},
		{errors.New("something odd"), tools.VerdictUnknown},
	} {
		if got := githubtools.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
