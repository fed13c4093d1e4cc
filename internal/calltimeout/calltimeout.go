// Package calltimeout bounds each HTTP call a worker makes to a dependency
// (GitHub, Slack) by what the call is: a read gives up sooner than a write.
//
// The guarantee: every request that goes through a Transport is cancelled
// once its call kind's timeout has passed since the request started,
// whether the client is still writing it, waiting for the answer or reading
// the body; the time covers the whole exchange, as http.Client.Timeout
// does. A write that times out after its request left is an unknown
// outcome, settled by a reconciler (docs/design.md §5.4): the sooner the
// worker stops waiting for an answer that is late, the sooner the
// reconciler looks — so a write's timeout is set a little past the time
// the service itself gives up on a request (GitHub: 10 s), not a minute.
package calltimeout

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// Transport is an http.RoundTripper that bounds each call by the timeout of
// its kind. A zero timeout leaves that kind unbounded.
type Transport struct {
	// Base sends the requests; nil is http.DefaultTransport.
	Base http.RoundTripper
	// Read and Write are the timeouts of a read and of a write.
	Read, Write time.Duration
	// IsWrite tells a write from a read; nil is ByMethod.
	IsWrite func(*http.Request) bool
}

// ByMethod counts every request but GET, HEAD and OPTIONS as a write, as
// REST APIs such as GitHub's are built.
func ByMethod(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// SlackWrites counts a Slack Web API call as a write when its method (the
// last element of the URL path, such as chat.postMessage) is in the chat
// family or otherwise changes something; slack-go sends reads such as
// conversations.history as POSTs too, so the HTTP method cannot tell.
func SlackWrites(req *http.Request) bool {
	method := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
	return strings.HasPrefix(method, "chat.") || strings.HasPrefix(method, "reactions.add") ||
		strings.HasPrefix(method, "files.") || strings.HasPrefix(method, "pins.add")
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	isWrite := t.IsWrite
	if isWrite == nil {
		isWrite = ByMethod
	}
	d := t.Read
	if isWrite(req) {
		d = t.Write
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if d <= 0 {
		return base.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), d)
	resp, err := base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the call's timer when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
