package sandbox

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refuseFor is long enough that the requests made during a refusal happen
// inside it even on a slow machine, and short enough for a unit test.
const refuseFor = 3 * time.Second

// TestModelRefuseConnection: while refuse_connection holds the port closed,
// a dial is refused before any byte of the request is written (NOT_SENT), a
// client's idle connection is gone too, and nothing reaches the fake; then
// the port reopens on the same address.
func TestModelRefuseConnection(t *testing.T) {
	sb := startSandbox(t, Options{})
	reopened := make(chan struct{}, 1)
	sb.Model.door.mu.Lock()
	sb.Model.door.onReopen = func() { reopened <- struct{}{} }
	sb.Model.door.mu.Unlock()
	url := sb.AnthropicURL + "v1/messages"

	old := testClient(t) // it keeps an idle connection from this request
	if x := send(t, context.Background(), old, url, anthropicBody("hello", 0, 0)); x.err != nil || x.streamErr != nil {
		t.Fatalf("before the refusal: %v %v", x.err, x.streamErr)
	}
	var added map[string]any
	faults := strings.TrimSuffix(sb.ModelURL, "/v1") + "/_sandbox/faults"
	if code := controlRequest(t, http.MethodPost, faults, `{"endpoint":"messages","kind":"refuse_connection","refuse_for":"`+refuseFor.String()+`"}`, &added); code != http.StatusCreated ||
		added["fired"] != 1.0 || added["refuse_for"] != refuseFor.String() {
		t.Fatalf("POST: %d %v", code, added)
	}

	x := send(t, context.Background(), testClient(t), url, anthropicBody("hello", 0, 0))
	if !errors.Is(x.err, syscall.ECONNREFUSED) || x.wrote || x.firstByte {
		t.Fatalf("fresh client: err %v, wrote %v; want connection refused before anything was written", x.err, x.wrote)
	}
	if x := send(t, context.Background(), old, url, openAIBody("hello", 0, 0)); x.err == nil {
		t.Fatalf("client with an idle connection: got %v, want an error", x.resp.Status)
	}
	if st := sb.Model.Stats(); st.Requests != 1 || st.Faulted != 0 {
		t.Errorf("during the refusal: stats %+v, want only the first request", st)
	}
	// The closed port stays the model's: another server cannot be given it
	// and answer the dials meant to be refused (a CI run once saw a task's
	// requests reach another test's sandbox that had been handed the port).
	host := strings.TrimPrefix(strings.TrimSuffix(sb.ModelURL, "/v1"), "http://")
	if ln, err := net.Listen("tcp", host); err == nil {
		ln.Close()
		t.Errorf("during the refusal another listener took %s; want the port held", host)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listening on the refused port: %v, want address in use", err)
	}

	waitFor(t, reopened, "the port to reopen")
	for _, c := range []*http.Client{old, testClient(t)} {
		if x := send(t, context.Background(), c, url, anthropicBody("hello", 0, 0)); x.err != nil || !decode(t, "anthropic", x.events).done {
			t.Fatalf("after the refusal: %v %v", x.err, x.streamErr)
		}
	}
	if st := sb.Model.Stats(); st.Requests != 3 || st.Faulted != 0 {
		t.Errorf("stats %+v, want 3 requests", st)
	}
}

// TestModelRefusalEndsWithTheSandbox: Close does not wait for a closed port
// to reopen.
func TestModelRefusalEndsWithTheSandbox(t *testing.T) {
	sb, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	addRule(t, sb.Model, FaultRule{Endpoint: "chat/completions", Kind: FaultRefuseConnection, RefuseFor: time.Hour})
	closed := make(chan error, 1)
	go func() { closed <- sb.Close() }()
	if err := waitFor(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
}

func TestModelRefuseConnectionValidation(t *testing.T) {
	m := NewModel()
	for _, bad := range []FaultRule{
		{Endpoint: "messages", Kind: FaultRefuseConnection},
		{Endpoint: "messages", Kind: FaultRefuseConnection, RefuseFor: time.Second, Times: 1},
		{Endpoint: "messages", Kind: FaultStall, RefuseFor: time.Second},
	} {
		if err := m.AddFault(bad); err == nil {
			t.Errorf("AddFault(%+v) = nil, want an error", bad)
		}
	}
	if _, err := parseScript([]byte(`{"name":"x","steps":[{"text":"hi","fault":{"kind":"refuse_connection","refuse_for":"1s"}}]}`)); err == nil ||
		!strings.Contains(err.Error(), "cannot strike one step") {
		t.Errorf("step refusal: %v", err)
	}
}
