package calltimeout_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/calltimeout"
)

// A server that holds every answer until the test ends: a call returns only
// when its timeout cancels it.
func holdingServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fast" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv
}

// Each kind of call gives up after its own timeout: the read first, though
// it started after the write.
func TestReadsAndWritesTimeOutByTheirKind(t *testing.T) {
	t.Parallel()
	srv := holdingServer(t)
	client := &http.Client{Transport: &calltimeout.Transport{Read: 50 * time.Millisecond, Write: 300 * time.Millisecond}}
	type ended struct {
		kind string
		err  error
	}
	done := make(chan ended, 2)
	call := func(kind, method string) {
		req, _ := http.NewRequest(method, srv.URL+"/held", strings.NewReader(""))
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- ended{kind, err}
	}
	go call("write", http.MethodPost)
	go call("read", http.MethodGet)
	first, second := <-done, <-done
	if first.kind != "read" || second.kind != "write" {
		t.Fatalf("the %s ended first, then the %s; want the read first", first.kind, second.kind)
	}
	for _, e := range []ended{first, second} {
		if !errors.Is(e.err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want its deadline exceeded", e.kind, e.err)
		}
	}
}

// A call that answers in time is read whole, its timer released on close.
func TestAnswerInTimeIsReadWhole(t *testing.T) {
	t.Parallel()
	srv := holdingServer(t)
	client := &http.Client{Transport: &calltimeout.Transport{Read: time.Second, Write: time.Second}}
	resp, err := client.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(body) != "ok" {
		t.Fatalf("body %q, %v; want ok", body, err)
	}
}

// Slack's reads are POSTs too: its calls are told apart by their method.
func TestSlackWritesAreToldByMethod(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/api/chat.postMessage":      true,
		"/api/chat.update":           true,
		"/api/conversations.history": false,
		"/api/conversations.replies": false,
		"/api/auth.test":             false,
	} {
		req := httptest.NewRequest(http.MethodPost, "http://slack.test"+path, nil)
		if got := calltimeout.SlackWrites(req); got != want {
			t.Errorf("SlackWrites(%s) = %t, want %t", path, got, want)
		}
	}
}
