package model

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// NewHTTPClient returns the HTTP client a provider streams through: dialling
// and the TLS handshake are bounded by connect, and nothing else is — no
// overall timeout, no response-header timeout — since the attempt's
// watchdogs (first event, idle, total; Limits) decide how long a request may
// take, and say why when they cut it.
func NewHTTPClient(connect time.Duration) *http.Client {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	}
	t.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = connect
	t.ResponseHeaderTimeout = 0 // the first-event watchdog decides
	return &http.Client{Transport: t}
}

// RetryAfter reads the delay a provider asked for: retry-after-ms
// (milliseconds), else Retry-After in seconds or as an HTTP date. Zero means
// no usable header. Values are not capped here: the turn guard decides what
// an over-long wait means.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < math.MaxInt64/float64(time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if sec, err := strconv.ParseFloat(v, 64); err == nil {
		if sec > 0 && sec < math.MaxInt64/float64(time.Second) {
			return time.Duration(sec * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Redact removes secret from text that is about to leave a provider, in
// case a server or a URL echoes it. An empty secret redacts nothing.
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

// TransportFailure is the outcome of a request that failed without an HTTP
// response, judged by what rec saw leave the worker: with no byte of the
// request written, a transport failure (dial, DNS, TLS, proxy) is not_sent
// and safe to send again, while any other error is the client refusing to
// build the request, which sending again cannot help (rejected); once bytes
// were written the provider may have started the work, so it is unknown
// (docs/design.md §4.1). redact scrubs the message of the provider's key.
func TransportFailure(err error, rec *PhaseRecorder, redact func(string) string) *AttemptError {
	var urlErr *url.Error
	switch {
	case !rec.WroteRequestBytes() && errors.As(err, &urlErr):
		return &AttemptError{Outcome: OutcomeNotSent, Phase: PhaseNotSent,
			Message: redact("could not reach the provider: " + err.Error()), Err: err}
	case !rec.WroteRequestBytes():
		return &AttemptError{Outcome: OutcomeRejected, Phase: PhaseNotSent,
			Message: redact("could not build the request: " + err.Error()), Err: err}
	default:
		return &AttemptError{Outcome: OutcomeUnknown, Phase: rec.Phase(),
			Message: redact("the connection failed after the request was sent: " + err.Error()), Err: err}
	}
}

// RequestCancelled is the outcome of a request whose context ended (the
// attempt was cut or cancelled), whatever error the client made of it, or
// nil while ctx is live: the cause says why, and the phase how far the
// request got.
func RequestCancelled(ctx context.Context, rec *PhaseRecorder, redact func(string) string) *AttemptError {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	return &AttemptError{Outcome: OutcomeCancelled, Phase: rec.Phase(),
		Message: redact("the request was cancelled: " + cause.Error()), Err: cause}
}
