package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/tool"
)

// stateVar, set, makes the test binary the sandbox MCP server over stdio,
// with its state in the file it names.
const stateVar = "CAPSTAN_TEST_MCP_STATE"

func TestMain(m *testing.M) {
	if os.Getenv(environmentVar) != "" {
		if err := serveEnvironment(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv(stateVar); path != "" {
		store, err := mcpserver.OpenFile(path)
		if err == nil {
			err = mcpserver.ServeStdio(context.Background(), store, mcpserver.Options{})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const sandboxTools = `"tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}, "upsert_ticket": {"class": "idempotent"}}`

// stdioServer configures the sandbox server over stdio, state in a file.
func stdioServer(t *testing.T, callTimeout string) (*Server, *mcpserver.Store) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state.json")
	store, err := mcpserver.OpenFile(state)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	data := fmt.Sprintf(`{"mcpServers": {"sb": {"command": %q, "env": {%q: "${STATE}"},
	  "capstan": {"call_timeout": %q, %s}}}}`, self, stateVar, callTimeout, sandboxTools)
	c, err := Parse("test.json", []byte(data), env(map[string]string{"STATE": state}))
	if err != nil {
		t.Fatal(err)
	}
	return c.Servers["sb"], store
}

// httpServer configures the sandbox server over streamable HTTP.
func httpServer(t *testing.T, callTimeout string) (*Server, *mcpserver.Store, *mcpserver.HTTPServer) {
	t.Helper()
	store := mcpserver.NewStore()
	ts := mcpserver.StartHTTP(store, mcpserver.Options{})
	t.Cleanup(ts.Close)
	data := fmt.Sprintf(`{"mcpServers": {"sb": {"url": %q, "headers": {"X-Token": "${TOKEN}"},
	  "capstan": {"call_timeout": %q, %s}}}}`, ts.URL, callTimeout, sandboxTools)
	c, err := Parse("test.json", []byte(data), env(map[string]string{"TOKEN": "tok"}))
	if err != nil {
		t.Fatal(err)
	}
	return c.Servers["sb"], store, ts
}

func openTools(t *testing.T, s *Server) (*Conn, map[string]tool.Tool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ts, err := ServerTools(c)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]tool.Tool{}
	for _, impl := range ts {
		byName[impl.Name()] = impl
	}
	return c, byName
}

func state(t *testing.T, s *mcpserver.Store) mcpserver.State {
	t.Helper()
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestToolsOverHTTPCarryTheOperationIDAndTheirClasses(t *testing.T) {
	s, store, _ := httpServer(t, "5s")
	_, ts := openTools(t, s)
	create := ts["mcp__sb__create_ticket"]
	if create == nil || create.Class() != capstan.ClassUnsafe {
		t.Fatalf("create_ticket: %v", create)
	}
	if _, ok := create.(tool.Finder); !ok {
		t.Error("create_ticket has a look-up configured but is no Finder")
	}
	if c := ts["mcp__sb__upsert_ticket"].Class(); c != capstan.ClassIdempotent {
		t.Errorf("upsert_ticket class %s", c)
	}
	// Not trusted: the annotations of find_ticket (read-only) are not believed.
	if c := ts["mcp__sb__find_ticket"].Class(); c != capstan.ClassUnsafe {
		t.Errorf("find_ticket class %s, want unsafe (server not trusted)", c)
	}
	if _, ok := ts["mcp__sb__search_tickets"].(tool.Finder); ok {
		t.Error("search_tickets has no look-up but is a Finder")
	}
	args := json.RawMessage(`{"title":"first"}`)
	if _, err := create.Identify(args); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Identify(json.RawMessage(`{"title":1}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("a schema violation: %v", err)
	}
	res, err := create.Execute(context.Background(), tool.Call{OperationID: "op-1", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExternalID != "T-1" {
		t.Errorf("external id %q", res.ExternalID)
	}
	st := state(t, store)
	if len(st.Calls) != 1 || st.Calls[0].OperationID != "op-1" || st.Effects("") != 1 {
		t.Errorf("state %+v", st)
	}
	// The look-up finds it.
	e, err := create.(tool.Finder).Effect(tool.Sent{Call: tool.Call{OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.Find(context.Background())
	if err != nil || obs.Outcome != tool.Found || obs.ExternalID != "T-1" {
		t.Errorf("look-up: %+v, %v", obs, err)
	}
	e, _ = create.(tool.Finder).Effect(tool.Sent{Call: tool.Call{OperationID: "op-2"}})
	if obs, err := e.Find(context.Background()); err != nil || obs.Outcome != tool.NotSeen {
		t.Errorf("look-up of an operation never sent: %+v, %v", obs, err)
	}
	_ = store.Fault("find_ticket", mcpserver.FaultUnknown)
	if obs, err := e.Find(context.Background()); err != nil || obs.Outcome != tool.Ambiguous {
		t.Errorf("look-up that cannot tell: %+v, %v", obs, err)
	}
}

func TestOutcomesOfFaults(t *testing.T) {
	s, store, srv := httpServer(t, "300ms")
	_, ts := openTools(t, s)
	create := ts["mcp__sb__create_ticket"]
	call := func(op string) error {
		_, err := create.Execute(context.Background(), tool.Call{OperationID: op, Arguments: json.RawMessage(`{"title":"x"}`)})
		return err
	}
	cases := []struct {
		fault   string
		verdict tool.Verdict
		effects int
	}{
		{mcpserver.FaultError, tool.VerdictFailed, 0},
		{mcpserver.FaultInvalid, tool.VerdictFailed, 0},
		{mcpserver.FaultHang, tool.VerdictUnknown, 0},
		{mcpserver.FaultDrop, tool.VerdictUnknown, 1},
	}
	for i, tc := range cases {
		before := state(t, store).Effects("")
		_ = store.Fault("create_ticket", tc.fault)
		err := call(fmt.Sprintf("op-%d", i))
		if got := tool.Classify(err); got != tc.verdict {
			t.Errorf("%s: verdict %s (%v), want %s", tc.fault, got, err, tc.verdict)
		}
		if got := state(t, store).Effects("") - before; got != tc.effects {
			t.Errorf("%s: %d effects, want %d", tc.fault, got, tc.effects)
		}
	}
	srv.Close()
	// A call after the server went finds the session's stream broken
	// (unknown: the client cannot tell whether the request left) or the
	// server refusing the connection (not_sent); never failed.
	for _, op := range []string{"op-down", "op-down-2"} {
		if err := call(op); tool.Classify(err) != tool.VerdictNotSent && tool.Classify(err) != tool.VerdictUnknown {
			t.Errorf("a server gone: %v (%s), want not_sent or unknown", err, tool.Classify(err))
		}
	}
}

func TestStdioServerKilledMidCallIsRestarted(t *testing.T) {
	s, store := stdioServer(t, "5s")
	c, ts := openTools(t, s)
	upsert := ts["mcp__sb__upsert_ticket"]
	args := json.RawMessage(`{"key":"k","title":"x"}`)
	changed := c.Changed()
	_ = store.Fault("upsert_ticket", mcpserver.FaultCrash)
	_, err := upsert.Execute(context.Background(), tool.Call{OperationID: "op-1", Arguments: args})
	if v := tool.Classify(err); v != tool.VerdictUnknown {
		t.Fatalf("a crash mid-call: verdict %s (%v), want unknown", v, err)
	}
	select { // the process is started again and lists its tools
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatal("the server was not started again")
	}
	// An idempotent tool's retry carries the same operation id: one effect.
	res, err := upsert.Execute(context.Background(), tool.Call{OperationID: "op-1", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	st := state(t, store)
	if st.Effects("") != 1 || res.ExternalID != "T-1" {
		t.Errorf("after the retry: %d effects, external id %q; want 1 and T-1", st.Effects(""), res.ExternalID)
	}
	if calls := st.CallsOf("upsert_ticket"); len(calls) != 2 || calls[0].OperationID != "op-1" || calls[1].OperationID != "op-1" {
		t.Errorf("calls %+v", calls)
	}
}

// A call the sandbox holds (hang) ends when the sandbox stops, though the
// client never cancelled it: otherwise a lost notifications/cancelled
// leaves the server's session, and the test server closing it, waiting
// for ever (a CI run stood still for 25 minutes so).
func TestStoppedSandboxEndsHeldCalls(t *testing.T) {
	s, store, srv := httpServer(t, "1m")
	s.Capstan.IdleTimeout = time.Minute
	_, ts := openTools(t, s)
	_ = store.Fault("create_ticket", mcpserver.FaultHang)
	done := make(chan error, 1)
	go func() {
		_, err := ts["mcp__sb__create_ticket"].Execute(context.Background(),
			tool.Call{OperationID: "op-held", Arguments: json.RawMessage(`{"title":"x"}`)})
		done <- err
	}()
	waitCall(t, store, "create_ticket")
	srv.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a held call answered without error when the sandbox stopped")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a held call was still held 30 s after the sandbox stopped")
	}
	if st := state(t, store); st.Effects("") != 0 || len(st.Cancellations) != 0 {
		t.Errorf("%d effects, cancellations %+v; want none of either", st.Effects(""), st.Cancellations)
	}
}
