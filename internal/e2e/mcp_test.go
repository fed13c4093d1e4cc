package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The tools of an MCP server, end to end (issue 16): a worker starts the
// sandbox's MCP server over stdio from its CAPSTAN_MCP_CONFIG, the sandbox
// model calls mcp__tickets__…, and the server's own state counts the
// effects and records the operation id each call carried in _meta.

// mcpSecret is given to the MCP server through the config's env, by
// ${MCP_TICKETS_SECRET}: it must never reach the history.
const mcpSecret = "mcp-capstan-e2e-secret-5d1e"

// mcpWorker starts a worker whose CAPSTAN_MCP_CONFIG names the sandbox MCP
// server (stdio) with the capstan settings given, and returns its
// environment and the server's state.
func mcpWorker(t *testing.T, name, settings string, faults map[string][]string) ([]string, *mcpserver.Store) {
	t.Helper()
	env, store, _ := mcpWorkerSandbox(t, name, settings, faults)
	return env, store
}

// mcpWorkerSandbox is mcpWorker, with the sandbox the worker's model is.
func mcpWorkerSandbox(t *testing.T, name, settings string, faults map[string][]string) ([]string, *mcpserver.Store, *sandbox.Sandbox) {
	t.Helper()
	statePath, store := mcpStore(t, faults)
	env, sb := mcpWorkerWithSandbox(t, name, fmt.Sprintf(`{"command": %q, "args": ["--state", %q],
	  "env": {"TICKETS_TOKEN": "${MCP_TICKETS_SECRET}"}, "capstan": %s}`, sandboxMCPBin, statePath, settings))
	return env, store, sb
}

// mcpStore is the state of a sandbox MCP server, with faults queued.
func mcpStore(t *testing.T, faults map[string][]string) (string, *mcpserver.Store) {
	t.Helper()
	statePath := filepath.Join(t.TempDir(), "tickets.json")
	store, err := mcpserver.OpenFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	for impl, fs := range faults {
		if err := store.Fault(impl, fs...); err != nil {
			t.Fatal(err)
		}
	}
	return statePath, store
}

// mcpWorkerWith starts a worker whose CAPSTAN_MCP_CONFIG has the one
// server "tickets", as server (JSON) configures it.
func mcpWorkerWith(t *testing.T, name, server string) []string {
	t.Helper()
	env, _ := mcpWorkerWithSandbox(t, name, server)
	return env
}

// mcpWorkerWithSandbox is mcpWorkerWith, with the sandbox the worker's
// model is.
func mcpWorkerWithSandbox(t *testing.T, name, server string, extraEnv ...string) ([]string, *sandbox.Sandbox) {
	t.Helper()
	sb := startSandbox(t)
	cfgPath := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfgPath, []byte(`{"mcpServers": {"tickets": `+server+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, name, sb), "CAPSTAN_MCP_CONFIG="+cfgPath, "MCP_TICKETS_SECRET="+mcpSecret,
		"CAPSTAN_RECONCILE_WINDOW=2s")
	env = append(env, extraEnv...)
	startWorker(t, env)
	return env, sb
}

func mcpState(t *testing.T, store *mcpserver.Store) mcpserver.State {
	t.Helper()
	st, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runMCPTask starts a task playing script and returns its id.
func runMCPTask(t *testing.T, env []string, name, script string) string {
	t.Helper()
	taskID := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "The disk is full: file a ticket.", "--repo", "capstan-sandbox/demo",
		"--model", "openai:"+script, "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	return taskID
}

// oneOperation checks the task completed with one operation of tool in
// state, and returns it.
func oneOperation(t *testing.T, res workflows.TaskResult, impl string, state capstan.Outcome) workflows.OperationRecord {
	t.Helper()
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task: %s %s %s", res.Status, res.FailureCode, res.Message)
	}
	if len(res.Operations) != 1 || res.Operations[0].Tool != impl || res.Operations[0].State != state {
		t.Fatalf("operations %+v, want one %s %s", res.Operations, impl, state)
	}
	return res.Operations[0]
}

// An unsafe tool acts and its answer is lost: the operation is unknown,
// its look-up tool finds the ticket, and the task completes with exactly
// one ticket, made by the one call that carried the operation id. The
// secret in the server's env never reaches the history.
func TestMCPLostAnswerSettledByLookup(t *testing.T) {
	t.Parallel()
	env, store := mcpWorker(t, "e2e-mcp-lookup",
		`{"call_timeout": "2s", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`,
		map[string][]string{"create_ticket": {mcpserver.FaultDrop}})
	taskID := runMCPTask(t, env, "e2e-mcp-lookup", "mcp-ticket")
	res := waitResult(t, taskID)
	recordHistory(t, "mcp-lookup", workflows.WorkflowID(taskID))
	op := oneOperation(t, res, "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	if op.ExternalID != "T-1" {
		t.Errorf("operation %+v, want T-1 found by the look-up", op)
	}
	st := mcpState(t, store)
	calls := st.CallsOf("create_ticket")
	if st.Effects("") != 1 || len(calls) != 1 || calls[0].OperationID != op.OperationID {
		t.Errorf("server: %d tickets, calls %+v; want 1 ticket from 1 call carrying %s", st.Effects(""), calls, op.OperationID)
	}
	if len(st.CallsOf("find_ticket")) == 0 {
		t.Error("the look-up was never asked")
	}
	journal := strings.Join(queryJournal(t, taskID), "\n")
	if !strings.Contains(journal, "unknown") {
		t.Errorf("journal:\n%s\nwant the operation unknown before the look-up", journal)
	}
	hist := history(t, res.WorkflowID)
	if strings.Contains(hist, mcpSecret) {
		t.Error("the history contains the secret of the MCP server's env")
	}
	if !strings.Contains(hist, "mcp__tickets__create_ticket") {
		t.Fatal("history check is blind: the history does not name the tool")
	}
}

// Without a look-up, a lost answer goes to a person: resolve --found
// completes the task with the one ticket; after a call that hung (nothing
// made), resolve --absent sends it again with the same operation id, and
// the task completes with exactly one ticket.
func TestMCPLostAnswerWithoutLookupGoesToAPerson(t *testing.T) {
	t.Parallel()
	env, store := mcpWorker(t, "e2e-mcp-person", `{"call_timeout": "2s"}`,
		map[string][]string{"create_ticket": {mcpserver.FaultDrop, mcpserver.FaultHang}})

	found := runMCPTask(t, env, "e2e-mcp-found", "mcp-ticket")
	opID := waitNeedsHuman(t, env, found)
	// resolve --found takes an http(s) URL (the workflow's rule for every
	// tool); an MCP tool has no read-back, so it is recorded as given.
	const ticketURL = "https://tickets.example/T-1"
	if r := runStarter(t, env, "resolve", found, opID, "--found", ticketURL, "--as", "ops"); r.code != 0 {
		t.Fatalf("resolve --found: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	op := oneOperation(t, waitResult(t, found), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	if op.ExternalID != ticketURL || op.ResolvedBy != "ops" {
		t.Errorf("operation %+v, want %s resolved by ops", op, ticketURL)
	}
	if n := mcpState(t, store).Effects(""); n != 1 {
		t.Fatalf("%d tickets after the found, want 1", n)
	}

	absent := runMCPTask(t, env, "e2e-mcp-absent", "mcp-ticket")
	opID = waitNeedsHuman(t, env, absent)
	if r := runStarter(t, env, "resolve", absent, opID, "--absent", "--as", "ops"); r.code != 0 {
		t.Fatalf("resolve --absent: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	op = oneOperation(t, waitResult(t, absent), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	var ofAbsent []mcpserver.Call
	for _, c := range st.CallsOf("create_ticket") {
		if c.OperationID == op.OperationID {
			ofAbsent = append(ofAbsent, c)
		}
	}
	if st.Effects("") != 2 || len(ofAbsent) != 2 {
		t.Errorf("%d tickets in all, %d calls of the second task's operation; want 2 tickets (one per task) and 2 calls (the hung one, then the one sent again)",
			st.Effects(""), len(ofAbsent))
	}
}

// A person's --found of an unsafe tool with a look-up is read back through
// the look-up before it is accepted: the ticket's answer is lost and the
// look-up cannot tell at first, so a person is asked; a --found naming
// another ticket is refused with the ticket the look-up found, leaving the
// task waiting on the same operation, and one naming that ticket completes
// it, recorded as the look-up's id. One ticket in all.
func TestMCPPersonsFoundIsReadBackThroughTheLookup(t *testing.T) {
	t.Parallel()
	env, store := mcpWorker(t, "e2e-mcp-found-checked",
		`{"call_timeout": "2s", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`,
		map[string][]string{"create_ticket": {mcpserver.FaultDrop}, "find_ticket": {mcpserver.FaultUnknown}})
	taskID := runMCPTask(t, env, "e2e-mcp-found-checked", "mcp-ticket")
	opID := waitNeedsHuman(t, env, taskID)

	if r := runStarter(t, env, "resolve", taskID, opID, "--found", "https://tickets.example/T-9", "--as", "ops"); r.code != 2 || !strings.Contains(r.stderr, "T-1") {
		t.Errorf("resolve --found naming another ticket: exit %d, stdout %q, stderr %q; want exit 2 naming T-1, the ticket the look-up found", r.code, r.stdout, r.stderr)
	}
	if got := waitNeedsHuman(t, env, taskID); got != opID {
		t.Fatalf("after a refused --found the task waits for %s, want still %s", got, opID)
	}
	if r := runStarter(t, env, "resolve", taskID, opID, "--found", "https://tickets.example/T-1", "--as", "ops"); r.code != 0 || !strings.Contains(r.stdout, "resolved as found") {
		t.Fatalf("resolve --found naming the ticket: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	op := oneOperation(t, waitResult(t, taskID), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	if op.ExternalID != "T-1" || op.ResolvedBy != "ops" {
		t.Errorf("operation %+v, want T-1 (the look-up's form) resolved by ops", op)
	}
	st := mcpState(t, store)
	if st.Effects("") != 1 || len(st.CallsOf("create_ticket")) != 1 {
		t.Errorf("server: %d tickets, %d calls of create_ticket; want 1 and 1", st.Effects(""), len(st.CallsOf("create_ticket")))
	}
}

// An idempotent tool whose answer is lost is sent again with the same
// operation id, which the server deduplicates: one ticket.
func TestMCPIdempotentToolRetriedWithTheSameOperationID(t *testing.T) {
	t.Parallel()
	env, store := mcpWorker(t, "e2e-mcp-idem", `{"call_timeout": "2s", "tools": {"upsert_ticket": {"class": "idempotent"}}}`,
		map[string][]string{"upsert_ticket": {mcpserver.FaultDrop}})
	taskID := runMCPTask(t, env, "e2e-mcp-idem", "mcp-upsert")
	op := oneOperation(t, waitResult(t, taskID), "mcp__tickets__upsert_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	calls := st.CallsOf("upsert_ticket")
	if st.Effects("") != 1 || len(calls) != 2 || calls[0].OperationID != op.OperationID || calls[1].OperationID != op.OperationID {
		t.Errorf("server: %d tickets, calls %+v; want 1 ticket and 2 calls carrying %s", st.Effects(""), calls, op.OperationID)
	}
}

// The stdio server is killed in the middle of an unsafe call, after it
// acted: the worker starts it again, the operation is unknown, the look-up
// finds the ticket, and nothing is sent twice.
func TestMCPStdioServerKilledMidCall(t *testing.T) {
	t.Parallel()
	env, store := mcpWorker(t, "e2e-mcp-crash",
		`{"call_timeout": "5s", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`,
		map[string][]string{"create_ticket": {mcpserver.FaultCrash}})
	taskID := runMCPTask(t, env, "e2e-mcp-crash", "mcp-ticket")
	op := oneOperation(t, waitResult(t, taskID), "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	if op.ExternalID != "T-1" || st.Effects("") != 1 || len(st.CallsOf("create_ticket")) != 1 {
		t.Errorf("operation %+v; server: %d tickets, %d calls; want T-1 found, 1 ticket, 1 call",
			op, st.Effects(""), len(st.CallsOf("create_ticket")))
	}
}

// Over streamable HTTP, with a secret header: an unsafe tool's lost
// answer is settled by its look-up, one ticket, and the header's secret
// is absent from history.
func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	statePath, store := mcpStore(t, map[string][]string{"create_ticket": {mcpserver.FaultDrop}})
	srv := exec.Command(sandboxMCPBin, "--state", statePath, "--http", "127.0.0.1:0")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "mcp: ")
	if err != nil || !ok {
		t.Fatalf("sandbox-mcp --http printed %q, %v", line, err)
	}
	env := mcpWorkerWith(t, "e2e-mcp-http", fmt.Sprintf(`{"url": %q, "headers": {"Authorization": "Bearer ${MCP_TICKETS_SECRET}"},
	  "capstan": {"call_timeout": "2s", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}}`, url))
	taskID := runMCPTask(t, env, "e2e-mcp-http", "mcp-ticket")
	res := waitResult(t, taskID)
	op := oneOperation(t, res, "mcp__tickets__create_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	if op.ExternalID != "T-1" || st.Effects("") != 1 || len(st.CallsOf("create_ticket")) != 1 {
		t.Errorf("operation %+v; server: %d tickets, %d calls; want T-1 found, 1 ticket, 1 call",
			op, st.Effects(""), len(st.CallsOf("create_ticket")))
	}
	if strings.Contains(history(t, res.WorkflowID), mcpSecret) {
		t.Error("the history contains the secret of the MCP server's headers")
	}
}

// The server changes a tool's schema under a running task (its process is
// killed during a read and started again with the other schema): the
// task's next call of that tool is refused with a message the model reads,
// nothing is sent, and the task completes.
func TestMCPSchemaChangedUnderARunningTask(t *testing.T) {
	t.Parallel()
	env, store, sb := mcpWorkerSandbox(t, "e2e-mcp-schema",
		`{"call_timeout": "5s", "tools": {"search_tickets": {"class": "read_only"}}}`,
		map[string][]string{"search_tickets": {mcpserver.FaultCrash}})
	if err := store.SetSchemaVersion(2); err != nil { // read by the server started next
		t.Fatal(err)
	}
	taskID := runMCPTask(t, env, "e2e-mcp-schema", "mcp-schema")
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 2 {
		t.Fatalf("task: %s %s %s; operations %+v", res.Status, res.FailureCode, res.Message, res.Operations)
	}
	search, create := res.Operations[0], res.Operations[1]
	if search.Tool != "mcp__tickets__search_tickets" || search.State != capstan.OutcomeSucceeded {
		t.Errorf("search %+v, want succeeded after the server was started again", search)
	}
	if create.Tool != "mcp__tickets__create_ticket" || create.State != capstan.OutcomeFailed {
		t.Errorf("create %+v, want refused", create)
	}
	st := mcpState(t, store)
	if n := len(st.CallsOf("create_ticket")); n != 0 || st.Effects("") != 0 {
		t.Errorf("%d create calls and %d tickets reached the server, want none", n, st.Effects(""))
	}
	if msg := toolMessage(t, sb, create.ToolCallID); !strings.Contains(msg, "input schema changed") || !strings.Contains(msg, "nothing was sent") {
		t.Errorf("the model read %q, want the refusal saying the schema changed and nothing was sent", msg)
	}
}

// startMCPHTTP runs sandbox-mcp over streamable HTTP on addr (host:port,
// port 0 for any) with its state in statePath, and returns its URL and
// the process.
func startMCPHTTP(t *testing.T, statePath, addr string) (string, *exec.Cmd) {
	t.Helper()
	srv := exec.Command(sandboxMCPBin, "--state", statePath, "--http", addr)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "mcp: ")
	if err != nil || !ok {
		t.Fatalf("sandbox-mcp --http printed %q, %v", line, err)
	}
	return url, srv
}

// The server goes down under a task: its calls fail to connect (nothing
// sent), the server's breaker mcp/tickets opens and the task waits it out;
// once the server is back the task completes, with one ticket.
func TestMCPServerDownOpensItsBreaker(t *testing.T) {
	t.Parallel()
	statePath, store := mcpStore(t, nil)
	url, srv := startMCPHTTP(t, statePath, "127.0.0.1:0")
	env := mcpWorkerWith(t, "e2e-mcp-down", fmt.Sprintf(`{"url": %q,
	  "capstan": {"call_timeout": "2s", "breaker": {"failures": 2, "open": "3s"},
	    "tools": {"upsert_ticket": {"class": "idempotent"}}}}`, url))
	_ = srv.Process.Kill()
	_ = srv.Wait()
	taskID := runMCPTask(t, env, "e2e-mcp-down", "mcp-upsert")
	// Wait until the task waits for the breaker, then bring the server back
	// on the same address.
	deadline := time.After(90 * time.Second)
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for !strings.Contains(strings.Join(queryJournal(t, taskID), "\n"), "mcp/tickets") {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatalf("the task never waited for breaker mcp/tickets:\n%s", strings.Join(queryJournal(t, taskID), "\n"))
		}
	}
	if n := len(mcpState(t, store).Calls); n != 0 {
		t.Fatalf("%d calls reached a server that was down", n)
	}
	startMCPHTTP(t, statePath, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp"))
	op := oneOperation(t, waitResult(t, taskID), "mcp__tickets__upsert_ticket", capstan.OutcomeSucceeded)
	st := mcpState(t, store)
	if st.Effects("") != 1 || len(st.CallsOf("upsert_ticket")) != 1 || st.Calls[0].OperationID != op.OperationID {
		t.Errorf("server: %d tickets, calls %+v; want 1 ticket from 1 call", st.Effects(""), st.Calls)
	}
}
