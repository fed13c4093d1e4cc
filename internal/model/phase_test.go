package model

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

func TestPhaseRecorderMovesForwardOnly(t *testing.T) {
	t.Parallel()
	var r PhaseRecorder
	if got := r.Phase(); got != PhaseNotSent {
		t.Fatalf("zero value phase = %s, want %s", got, PhaseNotSent)
	}
	if r.WroteRequestBytes() {
		t.Fatal("zero value claims request bytes were written")
	}
	steps := []struct {
		advance Phase
		want    Phase
	}{
		{PhaseHeadersReceived, PhaseHeadersReceived},
		{PhaseSentNoHeaders, PhaseHeadersReceived}, // backwards: ignored
		{PhaseUnknown, PhaseHeadersReceived},       // not a step: ignored
		{Phase("BOGUS"), PhaseHeadersReceived},     // not a phase: ignored
		{PhaseStreamPartial, PhaseStreamPartial},
		{PhaseStreamPartial, PhaseStreamPartial},
		{PhaseStreamCompleted, PhaseStreamCompleted},
		{PhaseNotSent, PhaseStreamCompleted},
	}
	for _, s := range steps {
		r.Advance(s.advance)
		if got := r.Phase(); got != s.want {
			t.Fatalf("after Advance(%s): phase = %s, want %s", s.advance, got, s.want)
		}
	}
	if !r.WroteRequestBytes() {
		t.Fatal("WroteRequestBytes = false after the stream completed")
	}
}

func TestPhaseRecorderConcurrent(t *testing.T) {
	t.Parallel()
	var r PhaseRecorder
	var wg sync.WaitGroup
	for i := range 64 {
		p := phaseOrder[i%len(phaseOrder)]
		wg.Go(func() {
			r.Advance(p)
			_ = r.Phase()
		})
	}
	wg.Wait()
	if got := r.Phase(); got != PhaseStreamCompleted {
		t.Fatalf("phase = %s, want %s", got, PhaseStreamCompleted)
	}
}

func TestTraceContext(t *testing.T) {
	t.Parallel()
	t.Run("response headers", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)

		var rec PhaseRecorder
		req, _ := http.NewRequestWithContext(TraceContext(context.Background(), &rec), http.MethodPost, srv.URL, http.NoBody)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := rec.Phase(); got != PhaseHeadersReceived {
			t.Fatalf("phase = %s, want %s", got, PhaseHeadersReceived)
		}
	})

	t.Run("connection refused proves nothing was written", func(t *testing.T) {
		addr := closedAddr(t)
		var rec PhaseRecorder
		req, _ := http.NewRequestWithContext(TraceContext(context.Background(), &rec), http.MethodPost, "http://"+addr, http.NoBody)
		if _, err := http.DefaultClient.Do(req); err == nil {
			t.Fatal("request to a closed port succeeded")
		}
		if rec.WroteRequestBytes() || rec.Phase() != PhaseNotSent {
			t.Fatalf("phase = %s, wrote = %v; want NOT_SENT and nothing written", rec.Phase(), rec.WroteRequestBytes())
		}
	})

	t.Run("server holds the request before headers", func(t *testing.T) {
		arrived := make(chan struct{})
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(release); srv.Close() })

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var rec PhaseRecorder
		req, _ := http.NewRequestWithContext(TraceContext(ctx, &rec), http.MethodPost, srv.URL, http.NoBody)
		errc := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			errc <- err
		}()
		<-arrived
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if got := rec.Phase(); got != PhaseSentNoHeaders {
			t.Fatalf("phase = %s, want %s", got, PhaseSentNoHeaders)
		}
	})
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
