package github_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/transporttest"
	"github.com/capstanhq/capstan/tool"
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

func TestClassifyStatuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		header http.Header
		want   tool.Verdict
	}{
		{http.StatusUnprocessableEntity, nil, tool.VerdictFailed},
		{http.StatusNotFound, nil, tool.VerdictFailed},
		{http.StatusConflict, nil, tool.VerdictFailed},
		{http.StatusUnauthorized, nil, tool.VerdictFailed},
		{http.StatusForbidden, nil, tool.VerdictFailed},
		{http.StatusRequestTimeout, nil, tool.VerdictUnknown},
		{http.StatusTooManyRequests, nil, tool.VerdictUnknown},
		// A rate limit did nothing (see ratelimit_test.go for every form).
		{http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(time.Now().Add(time.Hour).Unix())}}, tool.VerdictNotSent},
		{http.StatusTooManyRequests, http.Header{"Retry-After": {"30"}}, tool.VerdictNotSent},
		{http.StatusInternalServerError, nil, tool.VerdictUnknown},
		{http.StatusBadGateway, nil, tool.VerdictUnknown},
		{http.StatusServiceUnavailable, nil, tool.VerdictUnknown},
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
	if err := listAgainst(context.Background(), t, c); githubtools.Classify(err) != tool.VerdictNotSent || githubtools.HTTPStatus(err) != http.StatusForbidden {
		t.Fatalf("first: %v", err)
	}
	// go-github now refuses locally without sending anything.
	err := listAgainst(context.Background(), t, c)
	if got := githubtools.Classify(err); got != tool.VerdictNotSent || githubtools.HTTPStatus(err) != 0 {
		t.Errorf("guarded: Classify(%v) = %q, status %d", err, got, githubtools.HTTPStatus(err))
	}
}

// What go-github adds to a transport failure, and what GitHub's Classify
// makes of it. How the transport's own errors classify is tested once, with
// plain net/http, in package tool; here only go-github's handling matters:
// it returns the transport error with its URL sanitised (the proof must
// survive that), it returns ctx.Err() in place of the transport error once
// the caller's context has ended, and an error with no answer carries no
// status, which GitHub's status rules must not take for a refusal.
func TestClassifyTransportFailuresThroughGoGitHub(t *testing.T) {
	ctx := context.Background()

	t.Run("dial refused is not sent", func(t *testing.T) {
		err := listAgainst(ctx, t, clientFor(t, "http://"+transporttest.RefusedAddr(t)+"/", nil))
		if got := githubtools.Classify(err); got != tool.VerdictNotSent || githubtools.HTTPStatus(err) != 0 {
			t.Errorf("Classify(%v) = %q, status %d; want not_sent and no status", err, got, githubtools.HTTPStatus(err))
		}
	})

	t.Run("timeout after sending is unknown", func(t *testing.T) {
		base, _ := transporttest.HangingServer(t)
		err := listAgainst(ctx, t, clientFor(t, base, &http.Client{Timeout: 50 * time.Millisecond}))
		if got := githubtools.Classify(err); got != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q, want unknown: a timeout is never failed", err, got)
		}
	})

	t.Run("context deadline is unknown", func(t *testing.T) {
		base, _ := transporttest.HangingServer(t)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err := listAgainst(dctx, t, clientFor(t, base, nil))
		if got := githubtools.Classify(err); got != tool.VerdictUnknown {
			t.Errorf("Classify(%v) = %q", err, got)
		}
	})

	t.Run("cancelled in flight", func(t *testing.T) {
		base, entered := transporttest.HangingServer(t)
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- listAgainst(cctx, t, clientFor(t, base, nil)) }()
		<-entered
		cancel()
		if err := <-errc; githubtools.Classify(err) != tool.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, githubtools.Classify(err))
		}
	})

	t.Run("cancelled before sending", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		base, _ := transporttest.HangingServer(t)
		if err := listAgainst(cctx, t, clientFor(t, base, nil)); githubtools.Classify(err) != tool.VerdictCancelled {
			t.Errorf("Classify(%v) = %q", err, githubtools.Classify(err))
		}
	})
}

// GitHub's own errors get GitHub's verdicts.
func TestClassifyGitHubErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want tool.Verdict
	}{
		{&github.AcceptedError{}, tool.VerdictUnknown},
		{fmt.Errorf("get: %w", github.ErrPathForbidden), tool.VerdictFailed},
	} {
		if got := githubtools.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// Every error that is not GitHub's keeps the verdict tool.Classify gives it
// (tested there); in particular an unknown one without an HTTP status stays
// unknown. The errors below cover every verdict, so the comparison cannot
// pass by comparing one verdict with itself.
func TestClassifyKeepsToolsVerdicts(t *testing.T) {
	dnsErr := &url.Error{Op: "Get", URL: "https://nowhere.invalid/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}}
	covered := map[tool.Verdict]bool{}
	for _, err := range []error{
		nil,
		dnsErr,
		fmt.Errorf("wrapped: %w", context.Canceled),
		context.DeadlineExceeded,
		fmt.Errorf("x: %w", tool.ErrInvalidArguments),
		fmt.Errorf("x: %w", tool.ErrRefused),
		errors.New("something odd"),
	} {
		want := tool.Classify(err)
		covered[want] = true
		if got := githubtools.Classify(err); got != want {
			t.Errorf("Classify(%v) = %q, want tool.Classify's %q", err, got, want)
		}
	}
	for _, v := range []tool.Verdict{"", tool.VerdictNotSent, tool.VerdictCancelled, tool.VerdictFailed, tool.VerdictUnknown} {
		if !covered[v] {
			t.Errorf("no case where tool.Classify says %q", v)
		}
	}
}
