package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// MCP calls end to end, continued (issue 16): a read-only tool's lost
// answer, the liveness of a call (progress, idle timeout, cancellation), a
// large result kept by reference, over stdio and streamable HTTP, and one
// server capstan did not write.

// mcpTransports are the two ways a worker reaches the sandbox MCP server.
var mcpTransports = []string{"stdio", "http"}

// mcpWorkerOver starts a worker reaching the sandbox MCP server "tickets"
// over transport with the capstan settings given, faults queued, and
// returns its environment and the server's state.
func mcpWorkerOver(t *testing.T, transport, name, settings string, faults map[string][]string, extraEnv ...string) ([]string, *mcpserver.Store) {
	t.Helper()
	env, store, _ := mcpWorkerOverSandbox(t, transport, name, settings, faults, extraEnv...)
	return env, store
}

// mcpWorkerOverSandbox is mcpWorkerOver, with the sandbox the worker's
// model is.
func mcpWorkerOverSandbox(t *testing.T, transport, name, settings string, faults map[string][]string, extraEnv ...string) ([]string, *mcpserver.Store, *sandbox.Sandbox) {
	t.Helper()
	statePath, store := mcpStore(t, faults)
	server := fmt.Sprintf(`{"command": %q, "args": ["--state", %q], "capstan": %s}`, sandboxMCPBin, statePath, settings)
	if transport == "http" {
		url, _ := startMCPHTTP(t, statePath, "127.0.0.1:0")
		server = fmt.Sprintf(`{"url": %q, "capstan": %s}`, url, settings)
	}
	env, sb := mcpWorkerWithSandbox(t, name, server, extraEnv...)
	return env, store, sb
}

// A read-only tool whose answer is lost is sent again — no look-up, no
// person — and the task completes. Its second answer is over the result
// cap: the model is shown it cut, and the history never holds the body.
func TestMCPReadOnlyLostAnswerIsRetried(t *testing.T) {
	t.Parallel()
	for _, transport := range mcpTransports {
		t.Run(transport, func(t *testing.T) {
			name := "e2e-mcp-read-" + transport
			env, store, sb := mcpWorkerOverSandbox(t, transport, name,
				`{"call_timeout": "2s", "tools": {"search_tickets": {"class": "read_only"}}}`,
				map[string][]string{"search_tickets": {mcpserver.FaultDrop, mcpserver.FaultBig}})
			taskID := runMCPTask(t, env, name, "mcp-search")
			res := waitResult(t, taskID)
			op := oneOperation(t, res, "mcp__tickets__search_tickets", capstan.OutcomeSucceeded)
			calls := mcpState(t, store).CallsOf("search_tickets")
			if len(calls) != 2 || calls[0].OperationID != op.OperationID || calls[1].OperationID != op.OperationID {
				t.Errorf("calls %+v, want the dropped one and its retry, both carrying %s", calls, op.OperationID)
			}
			if j := strings.Join(queryJournal(t, taskID), "\n"); strings.Contains(j, "needs_human") {
				t.Errorf("journal:\n%s\nwant no person asked about a read", j)
			}
			if msg := toolMessage(t, sb, op.ToolCallID); !strings.Contains(msg, "over capstan's cap") || strings.Contains(msg, mcpserver.BigTail) {
				t.Errorf("the model read %.300q…, want the large result cut under the cap", msg)
			}
			hist := history(t, res.WorkflowID)
			if strings.Contains(hist, mcpserver.BigTail) || strings.Count(hist, "the ticket system says a great deal") > 5 {
				t.Error("the history holds the body of the large result, not only its reference")
			}
		})
	}
}

// An idempotent tool's lost answer over streamable HTTP: sent again with
// the same operation id, one ticket (the stdio case is
// TestMCPIdempotentToolRetriedWithTheSameOperationID).
func TestMCPIdempotentToolRetriedOverHTTP(t *testing.T) {
	t.Parallel()
	env, store := mcpWorkerOver(t, "http", "e2e-mcp-idem-http",
		`{"call_timeout": "2s", "tools": {"upsert_ticket": {"class": "idempotent"}}}`,
		map[string][]string{"upsert_ticket": {mcpserver.FaultDrop}})
	op := oneOperation(t, waitResult(t, runMCPTask(t, env, "e2e-mcp-idem-http", "mcp-upsert")), "mcp__tickets__upsert_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	calls := st.CallsOf("upsert_ticket")
	if st.Effects("") != 1 || len(calls) != 2 || calls[0].OperationID != op.OperationID || calls[1].OperationID != op.OperationID {
		t.Errorf("server: %d tickets, calls %+v; want 1 ticket and 2 calls carrying %s", st.Effects(""), calls, op.OperationID)
	}
}

// Without a look-up, over streamable HTTP: a lost answer goes to a
// person, whose resolve --found completes the task with the one ticket
// (the stdio case, and --absent, are
// TestMCPLostAnswerWithoutLookupGoesToAPerson; --absent over HTTP is
// TestMCPHangEndsAtTheIdleTimeout).
func TestMCPPersonFoundOverHTTP(t *testing.T) {
	t.Parallel()
	env, store := mcpWorkerOver(t, "http", "e2e-mcp-person-http", `{"call_timeout": "2s"}`,
		map[string][]string{"create_ticket": {mcpserver.FaultDrop}})
	taskID := runMCPTask(t, env, "e2e-mcp-person-http", "mcp-ticket")
	opID := waitNeedsHuman(t, env, taskID)
	const ticketURL = "https://tickets.example/T-1"
	if r := runStarter(t, env, "resolve", taskID, opID, "--found", ticketURL, "--as", "ops"); r.code != 0 {
		t.Fatalf("resolve --found: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	op := oneOperation(t, waitResult(t, taskID), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	if op.ExternalID != ticketURL || op.ResolvedBy != "ops" || st.Effects("") != 1 || len(st.CallsOf("create_ticket")) != 1 {
		t.Errorf("operation %+v; server: %d tickets, %d calls; want %s resolved by ops, 1 ticket from 1 call",
			op, st.Effects(""), len(st.CallsOf("create_ticket")), ticketURL)
	}
}

// A slow call that reports progress outlives its idle timeout (progress
// every 200 ms for 4 s, idle timeout 1.5 s): one call, carrying a progress
// token, one ticket, nothing cancelled.
func TestMCPSlowProgressSurvivesTheIdleTimeout(t *testing.T) {
	t.Parallel()
	env, store := mcpWorkerOver(t, "stdio", "e2e-mcp-slow",
		`{"call_timeout": "2m", "idle_timeout": "1500ms", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`,
		map[string][]string{"create_ticket": {mcpserver.FaultSlow}})
	op := oneOperation(t, waitResult(t, runMCPTask(t, env, "e2e-mcp-slow", "mcp-ticket")), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	calls := st.CallsOf("create_ticket")
	if st.Effects("") != 1 || len(calls) != 1 || calls[0].ProgressToken == "" || op.ExternalID != "T-1" || op.Recovered {
		t.Errorf("operation %+v; server: %d tickets, calls %+v; want T-1 answered by one call carrying a progress token", op, st.Effects(""), calls)
	}
	if len(st.CallsOf("find_ticket")) != 0 || len(st.Cancellations) != 0 {
		t.Errorf("look-ups %+v, cancellations %+v: want none", st.CallsOf("find_ticket"), st.Cancellations)
	}
}

// Calls that hang without progress end at their idle timeout (2 s), long
// before their call timeout (5 m), each by its class, over HTTP: the
// read-only search is sent again and answers; the unsafe create (no
// look-up) is unknown and waits for a person, whose --absent sends it
// again with the same operation id: one ticket. The server is told each
// time (notifications/cancelled).
func TestMCPHangEndsAtTheIdleTimeout(t *testing.T) {
	t.Parallel()
	env, store := mcpWorkerOver(t, "http", "e2e-mcp-hang",
		`{"call_timeout": "5m", "idle_timeout": "2s", "tools": {"search_tickets": {"class": "read_only"}}}`,
		map[string][]string{"search_tickets": {mcpserver.FaultHang}, "create_ticket": {mcpserver.FaultHang}})
	taskID := runMCPTask(t, env, "e2e-mcp-hang", "mcp-search-ticket")
	opID := waitNeedsHuman(t, env, taskID)
	if j := strings.Join(queryJournal(t, taskID), "\n"); !strings.Contains(j, "idle timeout") {
		t.Errorf("journal:\n%s\nwant the call ended by its idle timeout", j)
	}
	if r := runStarter(t, env, "resolve", taskID, opID, "--absent", "--as", "ops"); r.code != 0 {
		t.Fatalf("resolve --absent: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 2 {
		t.Fatalf("task: %s %s %s; operations %+v", res.Status, res.FailureCode, res.Message, res.Operations)
	}
	search, create := res.Operations[0], res.Operations[1]
	st := mcpState(t, store)
	if search.State != capstan.OutcomeSucceeded || len(st.CallsOf("search_tickets")) != 2 {
		t.Errorf("search %+v after %d calls, want succeeded on the second", search, len(st.CallsOf("search_tickets")))
	}
	creates := st.CallsOf("create_ticket")
	if create.State != capstan.OutcomeSucceeded || st.Effects("") != 1 || len(creates) != 2 || creates[1].OperationID != create.OperationID {
		t.Errorf("create %+v; server: %d tickets, calls %+v; want one ticket, the hung call sent again with its operation id", create, st.Effects(""), creates)
	}
	if len(st.Cancellations) < 2 {
		t.Errorf("cancellations %+v, want one per hung call", st.Cancellations)
	}
}

// Cancelling a task while an MCP call is in flight cancels the call: the
// server receives notifications/cancelled, and nothing was made.
func TestMCPCancelledTaskCancelsTheCall(t *testing.T) {
	t.Parallel()
	env, store := mcpWorkerOver(t, "stdio", "e2e-mcp-cancel",
		`{"call_timeout": "5m", "idle_timeout": "5m", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`,
		map[string][]string{"create_ticket": {mcpserver.FaultHang}}, "CAPSTAN_HEARTBEAT_TIMEOUT=3s")
	taskID := fmt.Sprintf("e2e-mcp-cancel-%d", time.Now().UnixNano())
	waited := make(chan result, 1)
	go func() {
		waited <- runStarter(t, env, "run", "--prompt", "The disk is full: file a ticket.", "--repo", "capstan-sandbox/demo",
			"--model", "openai:mcp-ticket", "--id", taskID, "--wait", "--json")
	}()
	r := cancelOnce(t, env, taskID, waited, "the server never received the call", 90*time.Second,
		func() bool { return len(mcpState(t, store).CallsOf("create_ticket")) > 0 })
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCancelled {
		t.Fatalf("task: %s %s %s, want cancelled", res.Status, res.FailureCode, res.Message)
	}
	// The call was cancelled after it was written: unknown, then settled
	// by the look-up (nothing was made).
	if len(res.Operations) != 1 || res.Operations[0].State != capstan.OutcomeAbsent {
		t.Errorf("operations %+v, want the one call absent by its look-up", res.Operations)
	}
	// The SDK sends notifications/cancelled as the call's context ends,
	// without waiting for it to be written.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(30 * time.Second)
	for len(mcpState(t, store).Cancellations) == 0 {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatal("the server never received notifications/cancelled")
		}
	}
	st := mcpState(t, store)
	if !strings.Contains(st.Cancellations[0].Reason, "canceled") {
		t.Errorf("cancellations %+v, want notifications/cancelled for the call (reason: context canceled)", st.Cancellations)
	}
	if st.Effects("") != 0 {
		t.Errorf("%d tickets, want none", st.Effects(""))
	}
}

// A task calls the tools of an MCP server capstan did not write — the
// reference server @modelcontextprotocol/server-everything over stdio,
// trusted, so its annotations give echo its class — and completes with
// their answers. Under CI=true a missing server fails it (.ci/run installs
// the pinned one).
func TestMCPServerCapstanDidNotWrite(t *testing.T) {
	t.Parallel()
	bin := testenv.EverythingServer(t) // skipped without it, failed under CI=true
	sb := startSandbox(t)
	cfgPath := filepath.Join(t.TempDir(), "mcp.json")
	cfg := fmt.Sprintf(`{"mcpServers": {"everything": {"command": %q, "args": ["stdio"],
	  "capstan": {"trusted": true, "connect_timeout": "60s", "tools": {"get-sum": {"class": "idempotent"}}}}}}`, bin)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, "e2e-mcp-everything", sb), "CAPSTAN_MCP_CONFIG="+cfgPath)
	startWorker(t, env)
	taskID := runMCPTask(t, env, "e2e-mcp-everything", "mcp-everything")
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 2 {
		t.Fatalf("task: %s %s %s; operations %+v", res.Status, res.FailureCode, res.Message, res.Operations)
	}
	for _, op := range res.Operations {
		if op.State != capstan.OutcomeSucceeded {
			t.Errorf("operation %+v, want succeeded", op)
		}
		msg := toolMessage(t, sb, op.ToolCallID)
		switch op.Tool {
		case "mcp__everything__echo":
			if !strings.Contains(msg, "hello from capstan") {
				t.Errorf("echo answered %q", msg)
			}
		case "mcp__everything__get-sum":
			if !strings.Contains(msg, "5") {
				t.Errorf("get-sum answered %q", msg)
			}
		default:
			t.Errorf("operation of %s", op.Tool)
		}
	}
}
