// Package transporttest provides the loopback endpoints on which an HTTP
// request fails in the ways tools.Classify tells apart. The tests of
// tool (plain net/http) and of its GitHub tools (go-github) both
// use them, so each package's tests name a failure rather than rebuild it.
package transporttest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// HangingServer starts a server that reads each request and never answers
// it, and returns its URL. entered receives one value per request once the
// request has been read, so a test can act while the request is in flight
// instead of guessing when it is. A request ends when its client gives up;
// the server is closed when the test ends.
func HangingServer(t testing.TB) (url string, entered <-chan struct{}) {
	t.Helper()
	in, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.URL, in
}

// RefusedAddr returns a loopback "host:port" that was just free and that
// nothing listens on, so a dial to it is refused.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
