package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/tool"
)

// Liveness of a call, over both transports: every call carries a progress
// token; progress notifications keep a slow call alive past its idle
// timeout; a call with no progress ends at its idle timeout (unknown,
// never failed) well before its call timeout; and a call that ends early
// — idle, or its caller cancelled — sends the server
// notifications/cancelled.

// liveServer is the sandbox server over transport ("stdio" or "http")
// with the idle timeout idle and a call timeout of a minute.
func liveServer(t *testing.T, transport string, idle time.Duration) (*Server, *mcpserver.Store) {
	t.Helper()
	var s *Server
	var store *mcpserver.Store
	if transport == "stdio" {
		s, store = stdioServer(t, "1m")
	} else {
		s, store, _ = httpServer(t, "1m")
	}
	s.Capstan.IdleTimeout = idle
	return s, store
}

// waitCancellations waits until the server recorded n cancellations.
func waitCancellations(t *testing.T, store *mcpserver.Store, n int) []mcpserver.Cancellation {
	t.Helper()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if st := state(t, store); len(st.Cancellations) >= n {
			return st.Cancellations
		}
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatalf("the server received %d notifications/cancelled, want %d", len(state(t, store).Cancellations), n)
		}
	}
}

func TestCallLiveness(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Run("slow progress survives the idle timeout", func(t *testing.T) {
				// Progress every 200 ms for 4 s, idle timeout 1.5 s.
				s, store := liveServer(t, transport, 1500*time.Millisecond)
				_, ts := openTools(t, s)
				_ = store.Fault("upsert_ticket", mcpserver.FaultSlow)
				res, err := ts["mcp__sb__upsert_ticket"].Execute(context.Background(),
					tool.Call{OperationID: "op-slow", Arguments: json.RawMessage(`{"key":"k","title":"x"}`)})
				if err != nil || res.ExternalID != "T-1" {
					t.Fatalf("a slow call that reported progress: %+v, %v", res, err)
				}
				st := state(t, store)
				if calls := st.CallsOf("upsert_ticket"); len(calls) != 1 || !strings.HasPrefix(calls[0].ProgressToken, "capstan-") {
					t.Errorf("calls %+v, want one carrying a progress token", calls)
				}
				if len(st.Cancellations) != 0 {
					t.Errorf("cancellations %+v, want none", st.Cancellations)
				}
			})
			t.Run("a hang ends at the idle timeout", func(t *testing.T) {
				s, store := liveServer(t, transport, 500*time.Millisecond)
				_, ts := openTools(t, s)
				_ = store.Fault("create_ticket", mcpserver.FaultHang)
				_, err := ts["mcp__sb__create_ticket"].Execute(context.Background(),
					tool.Call{OperationID: "op-hang", Arguments: json.RawMessage(`{"title":"x"}`)})
				if !errors.Is(err, ErrIdle) || tool.Classify(err) != tool.VerdictUnknown {
					t.Fatalf("a hung call: %v (%s), want ErrIdle, unknown", err, tool.Classify(err))
				}
				if c := waitCancellations(t, store, 1); c[0].RequestID == "" {
					t.Errorf("cancellation %+v names no request", c[0])
				}
			})
			t.Run("a cancelled caller cancels the call", func(t *testing.T) {
				s, store := liveServer(t, transport, time.Minute)
				_, ts := openTools(t, s)
				_ = store.Fault("create_ticket", mcpserver.FaultHang)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := ts["mcp__sb__create_ticket"].Execute(ctx,
						tool.Call{OperationID: "op-cancel", Arguments: json.RawMessage(`{"title":"x"}`)})
					done <- err
				}()
				waitCall(t, store, "create_ticket")
				cancel()
				if err := <-done; tool.Classify(err) != tool.VerdictCancelled {
					t.Errorf("a cancelled call: %v (%s), want cancelled", err, tool.Classify(err))
				}
				if c := waitCancellations(t, store, 1); !strings.Contains(c[0].Reason, "canceled") {
					t.Errorf("cancellation %+v, want the reason context canceled", c[0])
				}
			})
		})
	}
}

// waitCall waits until the server received a call of tool.
func waitCall(t *testing.T, store *mcpserver.Store, impl string) {
	t.Helper()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(30 * time.Second)
	for len(state(t, store).CallsOf(impl)) == 0 {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatalf("the server never received a call of %s", impl)
		}
	}
}

func TestIdleTimeoutSettings(t *testing.T) {
	c, err := Parse("t.json", []byte(`{"mcpServers": {"s": {"command": "x", "capstan": {"idle_timeout": "20s",
	  "tools": {"slow": {"idle_timeout": "5m"}}}}}}`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	st := c.Servers["s"].Capstan
	if st.IdleTimeoutOf("slow") != 5*time.Minute || st.IdleTimeoutOf("other") != 20*time.Second {
		t.Errorf("idle timeouts %s and %s, want 5m (the tool's) and 20s (the server's)", st.IdleTimeoutOf("slow"), st.IdleTimeoutOf("other"))
	}
	c, _ = Parse("t.json", []byte(`{"mcpServers": {"s": {"command": "x"}}}`), env(nil))
	if d := c.Servers["s"].Capstan.IdleTimeoutOf("any"); d != time.Minute {
		t.Errorf("default idle timeout %s, want 1m", d)
	}
	_, err = Parse("t.json", []byte(`{"mcpServers": {"s": {"command": "x", "capstan": {"tools": {"t": {"idle_timeout": "-1s"}}}}}}`), env(nil))
	if err == nil || !strings.Contains(err.Error(), `capstan.tools.t.idle_timeout: "-1s"`) {
		t.Errorf("a bad tool idle timeout: %v", err)
	}
}
