package activities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/tool"
)

// The tools of an MCP server go through the same ExecuteTool and
// Reconcile as the built-in ones: their class decides what a lost answer
// means, their operation id travels in _meta, and an unsafe tool's unknown
// outcome is settled by its look-up tool, or by a person.

// mcpFixture is the activities over the sandbox MCP server (streamable
// HTTP), its server "sb" configured with capstan settings.
type mcpFixture struct {
	*fixture
	store    *mcpserver.Store
	registry *tool.Registry
}

func newMCPFixture(t testing.TB, settings string) *mcpFixture {
	t.Helper()
	store := mcpserver.NewStore()
	srv := mcpserver.StartHTTP(store, mcpserver.Options{})
	t.Cleanup(srv.Close)
	cfg, err := mcp.Parse("test.json", []byte(fmt.Sprintf(`{"mcpServers": {"sb": {"url": %q, "capstan": %s}}}`, srv.URL, settings)),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := mcp.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	registry := tool.NewRegistry(pool.Tools()...)
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry)
	})
	return &mcpFixture{fixture: f, store: store, registry: registry}
}

func (f *mcpFixture) call(t testing.TB, impl string, n int, args string) contract.ExecuteToolInput {
	return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: fmt.Sprintf("call_%d", n),
		OperationID: fmt.Sprintf("d:T:t1:%s:%d", impl, n), Tool: impl, Arguments: f.args(t, args)}
}

func (f *mcpFixture) state(t *testing.T) mcpserver.State {
	st, err := f.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *mcpFixture) execute(t *testing.T, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	var res contract.ExecuteToolResult
	if err == nil {
		_ = v.Get(&res)
	}
	return res, err
}

func (f *mcpFixture) reconcile(t *testing.T, in contract.ExecuteToolInput, r *contract.Resolution) contract.ReconcileResult {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.Reconcile, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID,
		ToolCallID: in.ToolCallID, Arguments: in.Arguments, Since: time.Now(), Window: time.Millisecond, Resolution: r})
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ReconcileResult
	_ = v.Get(&res)
	return res
}

const (
	mcpCreate = "mcp__sb__create_ticket"
	mcpUpsert = "mcp__sb__upsert_ticket"
)

func TestMCPUnsafeToolLostAnswerIsSettledByItsLookup(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{"call_timeout": "300ms", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`)
	_ = f.store.Fault("create_ticket", mcpserver.FaultDrop)
	in := f.call(t, mcpCreate, 1, `{"title":"disk full"}`)
	_, err := f.execute(t, in)
	expectAppError(t, "a dropped answer of an unsafe MCP tool", err, contract.ErrTypeOperationUnknown)
	if op, err := f.ledger.Get(context.Background(), in.OperationID); err != nil || op.State != capstan.OutcomeUnknown {
		t.Fatalf("ledger: %+v, %v; want UNKNOWN", op, err)
	}
	res := f.reconcile(t, in, nil)
	if res.Verdict != capstan.VerdictFound || res.ExternalID != "T-1" || res.Item == "" {
		t.Errorf("reconcile: %+v; want found T-1 with a tool message", res)
	}
	st := f.state(t)
	if st.Effects("") != 1 || len(st.CallsOf("create_ticket")) != 1 || st.Calls[0].OperationID != in.OperationID {
		t.Errorf("server: %d effects, calls %+v; want one effect, one call carrying the operation id", st.Effects(""), st.Calls)
	}
	if look := st.CallsOf("find_ticket"); len(look) != 1 || !strings.Contains(string(look[0].Arguments), in.OperationID) {
		t.Errorf("look-ups %+v; want one asking about %s", look, in.OperationID)
	}
}

func TestMCPUnsafeToolWithoutLookupGoesToAPerson(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{"call_timeout": "300ms"}`) // unconfigured, not trusted: unsafe
	_ = f.store.Fault("create_ticket", mcpserver.FaultDrop)
	in := f.call(t, mcpCreate, 1, `{"title":"disk full"}`)
	_, err := f.execute(t, in)
	expectAppError(t, "a dropped answer", err, contract.ErrTypeOperationUnknown)
	if res := f.reconcile(t, in, nil); res.State != capstan.OutcomeNeedsHuman {
		t.Fatalf("reconcile without a look-up: %+v; want needs_human", res)
	}
	res := f.reconcile(t, in, &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: "T-1", ResolvedBy: "ops"})
	if res.State != capstan.OutcomeSucceeded || res.ExternalID != "T-1" {
		t.Errorf("a person's found: %+v", res)
	}
	if n := f.state(t).Effects(""); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// A person's found of a tool with a look-up is read back through it: a
// value that names another ticket than the one the look-up found is
// refused, and the operation still needs a person; one that names it is
// recorded in the look-up's form; a found for an operation the look-up
// says made nothing is refused; a look-up that cannot tell leaves the
// person's word.
func TestMCPPersonsFoundIsReadBackThroughTheLookup(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{"call_timeout": "300ms", "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}}}`)
	_ = f.store.Fault("create_ticket", mcpserver.FaultDrop)
	_ = f.store.Fault("find_ticket", mcpserver.FaultUnknown)
	in := f.call(t, mcpCreate, 1, `{"title":"disk full"}`)
	_, err := f.execute(t, in)
	expectAppError(t, "a dropped answer", err, contract.ErrTypeOperationUnknown)
	if res := f.reconcile(t, in, nil); res.State != capstan.OutcomeNeedsHuman {
		t.Fatalf("reconcile with a look-up that cannot tell: %+v; want needs_human", res)
	}
	found := func(in contract.ExecuteToolInput, value string) contract.ReconcileResult {
		return f.reconcile(t, in, &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: value, ResolvedBy: "ops"})
	}
	if res := found(in, "https://tickets.example/T-9"); res.State != capstan.OutcomeNeedsHuman || !strings.Contains(res.Reason, "T-1") {
		t.Errorf("a found naming another ticket: %+v; want refused, still needs_human, naming T-1", res)
	}
	if res := found(in, "https://tickets.example/T-1"); res.State != capstan.OutcomeSucceeded || res.ExternalID != "T-1" {
		t.Errorf("a found naming the ticket the look-up found: %+v; want succeeded, T-1", res)
	}

	// An operation that made nothing: its call hung and the look-up says
	// absent, so a person's found is refused.
	_ = f.store.Fault("create_ticket", mcpserver.FaultHang)
	_ = f.store.Fault("find_ticket", mcpserver.FaultUnknown)
	hung := f.call(t, mcpCreate, 2, `{"title":"disk full again"}`)
	_, err = f.execute(t, hung)
	expectAppError(t, "a hung call", err, contract.ErrTypeOperationUnknown)
	if res := f.reconcile(t, hung, nil); res.State != capstan.OutcomeNeedsHuman {
		t.Fatalf("reconcile of the hung call: %+v; want needs_human", res)
	}
	if res := found(hung, "https://tickets.example/T-2"); res.State != capstan.OutcomeNeedsHuman || !strings.Contains(res.Reason, "made nothing") {
		t.Errorf("a found of an operation the look-up says made nothing: %+v; want refused", res)
	}
	// The look-up cannot tell: the person's word is recorded as given.
	_ = f.store.Fault("find_ticket", mcpserver.FaultUnknown)
	if res := found(hung, "https://tickets.example/T-2"); res.State != capstan.OutcomeSucceeded || res.ExternalID != "https://tickets.example/T-2" {
		t.Errorf("a found the look-up cannot check: %+v; want succeeded as given", res)
	}
	if n := f.state(t).Effects(""); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

func TestMCPIdempotentToolIsRetriedWithTheSameOperationID(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{"call_timeout": "300ms", "tools": {"upsert_ticket": {"class": "idempotent"}}}`)
	_ = f.store.Fault("upsert_ticket", mcpserver.FaultDrop)
	in := f.call(t, mcpUpsert, 1, `{"key":"k","title":"disk full"}`)
	if _, err := f.execute(t, in); err == nil {
		t.Fatal("a dropped answer succeeded")
	}
	if op, err := f.ledger.Get(context.Background(), in.OperationID); err != nil || op.State != capstan.OutcomeAbsent {
		t.Fatalf("ledger: %+v, %v; want ABSENT: an idempotent call is sent again", op, err)
	}
	res, err := f.execute(t, in)
	if err != nil || res.State != capstan.OutcomeSucceeded || res.ExternalID != "T-1" {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	st := f.state(t)
	calls := st.CallsOf("upsert_ticket")
	if st.Effects("") != 1 || len(calls) != 2 || calls[0].OperationID != in.OperationID || calls[1].OperationID != in.OperationID {
		t.Errorf("%d effects, calls %+v; want one effect, two calls with the same operation id", st.Effects(""), calls)
	}
}

func TestMCPErrorsTheModelReads(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{}`)
	read := func(res contract.ExecuteToolResult) string {
		data, err := f.ledger.GetItem(context.Background(), res.Item)
		if err != nil {
			t.Fatal(err)
		}
		var msg model.Message
		_ = json.Unmarshal(data, &msg)
		return msg.Content
	}
	for i, fault := range []string{mcpserver.FaultError, mcpserver.FaultInvalid} {
		_ = f.store.Fault("create_ticket", fault)
		res, err := f.execute(t, f.call(t, mcpCreate, i, `{"title":"x"}`))
		if err != nil || res.State != capstan.OutcomeFailed {
			t.Errorf("%s: %+v, %v; want failed, told to the model", fault, res, err)
		}
		if msg := read(res); !strings.Contains(msg, "scripted") {
			t.Errorf("%s: the model reads %s", fault, msg)
		}
	}
	// A schema the model's arguments break is refused before anything is
	// sent.
	calls := len(f.state(t).Calls)
	res, err := f.execute(t, f.call(t, mcpCreate, 9, `{"title": 7}`))
	if err != nil || res.State != capstan.OutcomeFailed || !strings.Contains(read(res), `field \"title\" must be a string`) {
		t.Errorf("bad arguments: %+v, %v: %s", res, err, read(res))
	}
	if len(f.state(t).Calls) != calls {
		t.Error("arguments the schema refuses were sent")
	}
}

func TestMCPToolWhoseSchemaChangedSinceTheCallIsRefused(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{}`)
	in := f.call(t, mcpCreate, 1, `{"title":"x"}`)
	turn, _ := json.Marshal(contract.ModelTurnResult{ToolCalls: []contract.ToolCallRef{
		{ID: in.ToolCallID, Name: mcpCreate, Arguments: in.Arguments, SchemaHash: "0123456789abcdef"}}})
	if _, err := f.ledger.CommitTurn(context.Background(), in.TurnID, turn); err != nil {
		t.Fatal(err)
	}
	res, err := f.execute(t, in)
	if err != nil || res.State != capstan.OutcomeFailed || !strings.Contains(res.Preview, "input schema changed") {
		t.Errorf("%+v, %v; want refused, the model told the schema changed", res, err)
	}
	if n := len(f.state(t).Calls); n != 0 {
		t.Errorf("%d calls reached the server, want none", n)
	}
}

// BenchmarkMCPCall compares one call of a read-only MCP tool through
// ExecuteTool (ledger claim and record, breaker, transcript item) with the
// same call made directly on the connection.
func BenchmarkMCPCall(b *testing.B) {
	f := newMCPFixture(b, `{"tools": {"search_tickets": {"class": "read_only"}}}`)
	impl, err := f.registry.Get("mcp__sb__search_tickets")
	if err != nil {
		b.Fatal(err)
	}
	n := 0 // operation ids never repeat across the runs of b.N
	b.Run("direct", func(b *testing.B) {
		for range b.N {
			n++
			if _, err := impl.Execute(context.Background(), tool.Call{OperationID: fmt.Sprint(n), Arguments: json.RawMessage(`{"query":"x"}`)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("capstan", func(b *testing.B) {
		for range b.N {
			n++
			if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, f.call(b, "mcp__sb__search_tickets", n, `{"query":"x"}`)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A task offers its model only the MCP tools it fixed when it started, and
// a call records the hash the tool was fixed with; without a fixed set
// (a task started before changeMCPToolsPinned) every tool is offered and
// a call records the tool's hash now.
func TestMCPToolsFixedForTheTask(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{}`)
	v, err := f.env.ExecuteActivity(f.acts.WorkerLimits, contract.WorkerLimitsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var lim contract.WorkerLimitsResult
	_ = v.Get(&lim)
	if len(lim.Tools) != 4 || lim.Tools[0].Name != mcpCreate || len(lim.Tools[0].SchemaHash) != 16 {
		t.Fatalf("WorkerLimits tools %+v, want the 4 MCP tools with their hashes", lim.Tools)
	}
	create, _ := f.registry.Get(mcpCreate)
	set := &contract.ToolSet{Pins: []contract.ToolPin{{Name: mcpCreate, SchemaHash: "0000000000000000"}}}
	if got := activities.PinnedOffer(f.acts, set); len(got) != 1 || got[0] != mcpCreate {
		t.Errorf("offered %v, want only the fixed %s", got, mcpCreate)
	}
	if got := activities.PinnedOffer(f.acts, &contract.ToolSet{}); len(got) != 0 {
		t.Errorf("with an empty fixed set, offered %v", got)
	}
	if got := activities.PinnedOffer(f.acts, nil); len(got) != 4 {
		t.Errorf("without a fixed set, offered %v", got)
	}
	if h := activities.CallSchemaHash(create, set); h != "0000000000000000" {
		t.Errorf("a call records %q, want the fixed hash", h)
	}
	// A call of a tool that drifted from the fixed set is committed as made
	// (ExecuteTool refuses it, telling the model); a call of a tool as
	// fixed is held to its schema as the attempt finishes.
	bad := []byte(`{"title": 7}`)
	if err := activities.ValidateToolCall(f.acts, set, mcpCreate, bad); err != nil {
		t.Errorf("a drifted tool's call was refused as the attempt finished: %v", err)
	}
	now := &contract.ToolSet{Pins: []contract.ToolPin{{Name: mcpCreate, SchemaHash: create.(interface{ SchemaHash() string }).SchemaHash()}}}
	if err := activities.ValidateToolCall(f.acts, now, mcpCreate, bad); err == nil {
		t.Error("a call breaking the schema of a tool as fixed was accepted")
	}
	upsert, _ := f.registry.Get(mcpUpsert)
	in := f.call(t, mcpUpsert, 1, `{"key":"k","title":"x"}`)
	turn, _ := json.Marshal(contract.ModelTurnResult{ToolCalls: []contract.ToolCallRef{
		{ID: in.ToolCallID, Name: mcpUpsert, Arguments: in.Arguments, SchemaHash: activities.CallSchemaHash(upsert, set)}}})
	if _, err := f.ledger.CommitTurn(context.Background(), in.TurnID, turn); err != nil {
		t.Fatal(err)
	}
	res, err := f.execute(t, in)
	if err != nil || res.State != capstan.OutcomeFailed || !strings.Contains(res.Preview, "not among the tools fixed") {
		t.Errorf("a call of a tool the task did not fix: %+v, %v", res, err)
	}
	if n := len(f.state(t).Calls); n != 0 {
		t.Errorf("%d calls reached the server, want none", n)
	}
}

// The task's policy decides an MCP tool's call by its server too: a rule
// on server "sb" refuses the call before anything is sent, and the tool
// is not offered.
func TestMCPPolicyByServer(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{}`)
	in := f.call(t, mcpCreate, 1, `{"title":"x"}`)
	in.Policy = &contract.TaskPolicy{Tenant: "d", File: "policy.yaml",
		Source: "rules:\n  - name: no-tickets\n    server: sb\n    effect: deny\n    reason: this task files no tickets\n"}
	res, err := f.execute(t, in)
	if err != nil || res.State != capstan.OutcomeFailed || res.Decision == nil || res.Decision.Rule != "no-tickets" {
		t.Errorf("%+v, %v; want refused by no-tickets", res, err)
	}
	if n := len(f.state(t).Calls); n != 0 {
		t.Errorf("%d calls reached the server, want none", n)
	}
}

// A result over the cap is kept whole in the ledger by reference: the
// model's tool message holds the text cut to about the cap, with a note
// naming the item; the workflow's result holds references and a short
// preview, never the body.
func TestMCPLargeResultIsKeptByReference(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, `{"tools": {"upsert_ticket": {"class": "idempotent"}}}`)
	_ = f.store.Fault("upsert_ticket", mcpserver.FaultBig)
	res, err := f.execute(t, f.call(t, mcpUpsert, 1, `{"key":"k","title":"big"}`))
	if err != nil || res.State != capstan.OutcomeSucceeded || res.ExternalID != "T-1" {
		t.Fatalf("%+v, %v; want succeeded, T-1", res, err)
	}
	data, err := f.ledger.GetItem(context.Background(), res.Item)
	if err != nil {
		t.Fatal(err)
	}
	var msg model.Message
	_ = json.Unmarshal(data, &msg)
	var doc struct {
		Text      string `json:"text"`
		Truncated struct {
			Bytes int    `json:"bytes"`
			Item  string `json:"item"`
			Note  string `json:"note"`
		} `json:"truncated"`
	}
	if err := json.Unmarshal([]byte(msg.Content), &doc); err != nil {
		t.Fatalf("tool message %.200s: %v", msg.Content, err)
	}
	if len(msg.Content) > config.DefaultMCPResultCap || strings.Contains(msg.Content, mcpserver.BigTail) ||
		!strings.HasPrefix(doc.Text, "ticket T-1") || doc.Truncated.Bytes <= mcpserver.BigSize || !strings.Contains(doc.Truncated.Note, doc.Truncated.Item) {
		t.Errorf("the model is shown %d bytes: %.300s…; want the text cut under the cap with a note naming the item", len(msg.Content), msg.Content)
	}
	whole, err := f.ledger.GetItem(context.Background(), doc.Truncated.Item)
	if err != nil || !strings.Contains(string(whole), mcpserver.BigTail) || len(whole) != doc.Truncated.Bytes {
		t.Errorf("the item %s holds %d bytes (%v), want the whole result of %d", doc.Truncated.Item, len(whole), err, doc.Truncated.Bytes)
	}
	if len(res.Preview) > 400 || strings.Contains(res.Preview, mcpserver.BigTail) {
		t.Errorf("preview %q, want a short one", res.Preview)
	}
}
