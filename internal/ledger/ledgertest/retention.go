package ledgertest

import (
	"context"
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// chainRows are the ids and refs chainWrites wrote.
type chainRows struct {
	turn, op, own, msg, turnItem string
	decided                      string // an operation with a decision and no row: refused
	bytes                        int64  // of own, msg, turnItem, the turn's output and the op's result
}

// chainWrites makes the writes a task of chain scope makes — items it
// shares by content with others, one of its own, a turn with an item, an
// operation completed with its tool message — under ctx (scoped or not).
func (h *h) chainWrites(ctx context.Context, scope, tag string) chainRows {
	h.Helper()
	task := "T"
	if scope != "" {
		task = "T/" + scope
	}
	var r chainRows
	put := func(data string) string {
		ref, err := h.s.PutItem(ctx, []byte(data))
		if err != nil {
			h.Fatalf("PutItem: %v", err)
		}
		return ref
	}
	put("an item every task writes")
	if scope != "" {
		put("an item the chains share")
	}
	own, msg, turnItem, output, result := "own item of "+tag, "tool message of "+tag, "turn item of "+tag, "output of "+tag, "result of "+tag
	r.own = put(own)
	r.turn = task + "/t1"
	if _, err := h.s.CommitTurn(ctx, r.turn, []byte(output), []byte(turnItem)); err != nil {
		h.Fatalf("CommitTurn %s: %v", r.turn, err)
	}
	r.turnItem = ledger.ItemRef([]byte(turnItem))
	r.op = "ten:T:tool:key"
	if scope != "" {
		r.op = "ten:T:" + scope + ":tool:key"
	}
	c := h.claim("w1", ledger.Operation{ID: r.op, Tenant: "ten", TaskID: "T", Kind: "tool", RequestHash: "h"})
	if err := h.s.Complete(ctx, ledger.Completion{ID: r.op, Fence: c.Fence, State: capstan.OutcomeSucceeded,
		Result: []byte(result), Items: [][]byte{[]byte(msg)}}); err != nil {
		h.Fatalf("Complete %s: %v", r.op, err)
	}
	r.msg = ledger.ItemRef([]byte(msg))
	r.decided = r.op + ":refused"
	if _, _, err := h.s.RecordDecision(ctx, ledger.Decision{OperationID: r.decided, Tenant: "ten", TaskID: "T", Tool: "tool",
		Effect: "deny", Rule: "default/repository", Reason: "outside", Refused: true}); err != nil {
		h.Fatalf("RecordDecision %s: %v", r.decided, err)
	}
	r.bytes = int64(len(own) + len(msg) + len(turnItem) + len(output) + len(result))
	return r
}

func scopeOf(token, run string) ledger.Scope {
	return ledger.Scope{Token: token, Namespace: "ns", WorkflowID: "task-T", RunID: run, TaskID: "T"}
}

// Retention removes exactly one chain's rows: its turns, its operations
// and policy decisions (found by the scope in their ids), its row in the tasks table, and the
// items no one else refers to; another chain of the same task id, the rows
// of a task without a scope, and items shared with either stay. A dry run
// counts the same and deletes nothing.
func testRetentionRemovesOneChain(h *h) {
	const a, b = "~aaaaaaaaaaaa", "~bbbbbbbbbbbb"
	ctxA1 := ledger.WithScope(h.ctx, scopeOf(a, "run-1"))
	ctxA2 := ledger.WithScope(h.ctx, scopeOf(a, "run-2"))
	rowsA := h.chainWrites(ctxA1, a, "A")
	h.clock.Advance(time.Minute)
	if _, err := h.s.CommitTurn(ctxA2, "T/"+a+"/t1", []byte("a reset run's commit")); err != nil {
		h.Fatal(err)
	}
	rowsB := h.chainWrites(ledger.WithScope(h.ctx, scopeOf(b, "run-b")), b, "B")
	old := h.chainWrites(h.ctx, "", "an unscoped task")
	// An unscoped task refers to A's own item as well: it must stay.
	if _, err := h.s.PutItem(h.ctx, []byte("own item of A")); err != nil {
		h.Fatal(err)
	}

	if cs, err := h.s.Chains(h.ctx, Epoch); err != nil || len(cs) != 0 {
		h.Fatalf("Chains(before the first write) = %+v, %v; want none", cs, err)
	}
	cs, err := h.s.Chains(h.ctx, h.clock.Now().Add(time.Second))
	if err != nil || len(cs) != 2 {
		h.Fatalf("Chains = %+v, %v; want chains A and B", cs, err)
	}
	ca := cs[0]
	if ca.Scope != a || ca.RunID != "run-2" || ca.Namespace != "ns" || ca.WorkflowID != "task-T" || ca.TaskID != "T" ||
		!ca.UpdatedAt.Equal(Epoch.Add(time.Minute)) || !ca.CreatedAt.Equal(Epoch) {
		h.Fatalf("chain A = %+v; want scope %s, the last run run-2, created at the epoch, updated a minute later", ca, a)
	}
	// A's turn output was committed first, so the second commit kept it.
	want := ledger.Removed{Tasks: 1, Operations: 1, Decisions: 1, Turns: 1, Items: 2, Bytes: rowsA.bytes - int64(len("own item of A"))}
	dry, err := h.s.RemoveChain(h.ctx, ca, true)
	if h.sealed && dry.Bytes > want.Bytes {
		want.Bytes = dry.Bytes // ciphertext: larger than the plaintext counted
	}
	if err != nil || dry != want {
		h.Fatalf("RemoveChain(A, dry run) = %+v, %v; want %+v", dry, err, want)
	}
	if _, err := h.s.GetTurn(h.ctx, rowsA.turn); err != nil {
		h.Fatalf("a dry run deleted turn %s: %v", rowsA.turn, err)
	}
	got, err := h.s.RemoveChain(h.ctx, ca, false)
	if err != nil || got != want {
		h.Fatalf("RemoveChain(A) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := h.s.GetTurn(h.ctx, rowsA.turn); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("A's turn after its removal: %v, want ErrNotFound", err)
	}
	if _, err := h.s.Get(h.ctx, rowsA.op); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("A's operation after its removal: %v, want ErrNotFound", err)
	}
	for _, ref := range []string{rowsA.msg, rowsA.turnItem} {
		if _, err := h.s.GetItem(h.ctx, ref); !errors.Is(err, ledger.ErrNotFound) {
			h.Fatalf("A's item %s after its removal: %v, want ErrNotFound", ref, err)
		}
	}
	shared := ledger.ItemRef([]byte("an item the chains share"))
	for _, ref := range []string{rowsA.own, ledger.ItemRef([]byte("an item every task writes")), shared, rowsB.own, old.own} {
		if _, err := h.s.GetItem(h.ctx, ref); err != nil {
			h.Fatalf("item %s, which others refer to, after A's removal: %v", ref, err)
		}
	}
	for _, turn := range []string{rowsB.turn, old.turn} {
		if _, err := h.s.GetTurn(h.ctx, turn); err != nil {
			h.Fatalf("turn %s after A's removal: %v", turn, err)
		}
	}
	for _, op := range []string{rowsB.op, old.op} {
		if _, err := h.s.Get(h.ctx, op); err != nil {
			h.Fatalf("operation %s after A's removal: %v", op, err)
		}
	}
	if ds, err := h.s.Decisions(h.ctx, "T"); err != nil || len(ds) != 2 || ds[0].OperationID+ds[1].OperationID != old.decided+rowsB.decided {
		h.Fatalf("decisions of T after A's removal = %+v, %v; want B's and the unscoped task's", ds, err)
	}
	if again, err := h.s.RemoveChain(h.ctx, ca, false); err != nil || again != (ledger.Removed{}) {
		h.Fatalf("RemoveChain(A) again = %+v, %v; want nothing removed", again, err)
	}
	if u, err := h.s.CountUnscoped(h.ctx); err != nil || u != (ledger.Unscoped{Operations: 1, Turns: 1}) {
		h.Fatalf("CountUnscoped = %+v, %v; want the unscoped task's 1 operation and 1 turn", u, err)
	}
	// B was the last chain to refer to the shared item: it goes with B.
	wantB := ledger.Removed{Tasks: 1, Operations: 1, Decisions: 1, Turns: 1, Items: 4, Bytes: rowsB.bytes + int64(len("an item the chains share"))}
	got, err = h.s.RemoveChain(h.ctx, cs[1], false)
	if h.sealed && got.Bytes > wantB.Bytes {
		wantB.Bytes = got.Bytes
	}
	if err != nil || got != wantB {
		h.Fatalf("RemoveChain(B) = %+v, %v; want %+v", got, err, wantB)
	}
	if _, err := h.s.GetItem(h.ctx, shared); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("the item only the chains shared, after both were removed: %v, want ErrNotFound", err)
	}
	for _, ref := range []string{old.own, ledger.ItemRef([]byte("an item every task writes"))} {
		if _, err := h.s.GetItem(h.ctx, ref); err != nil {
			h.Fatalf("item %s of the unscoped task after every chain's removal: %v", ref, err)
		}
	}
}

// An item a late attempt of a chain writes after retention removed the
// chain (a zombie activity) makes the chain known again, so the next
// retention collects the item: no ownership row outlives every chain that
// could remove it.
func testRetentionCollectsAZombiesItem(h *h) {
	const z = "~cccccccccccc"
	ctx := ledger.WithScope(h.ctx, scopeOf(z, "run-z"))
	h.chainWrites(ctx, z, "Z")
	h.clock.Advance(time.Minute)
	chains := func() []ledger.Chain {
		h.Helper()
		cs, err := h.s.Chains(h.ctx, h.clock.Now().Add(time.Second))
		if err != nil {
			h.Fatal(err)
		}
		return cs
	}
	cs := chains()
	if len(cs) != 1 {
		h.Fatalf("Chains = %+v; want chain %s", cs, z)
	}
	if _, err := h.s.RemoveChain(h.ctx, cs[0], false); err != nil {
		h.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	late := []byte("an item written after the chain was removed")
	ref, err := h.s.PutItem(ctx, late)
	if err != nil {
		h.Fatal(err)
	}
	cs = chains()
	if len(cs) != 1 || cs[0].Scope != z {
		h.Fatalf("Chains after the zombie's write = %+v; want chain %s known again", cs, z)
	}
	got, err := h.s.RemoveChain(h.ctx, cs[0], false)
	if err != nil || got.Items != 1 || got.Tasks != 1 {
		h.Fatalf("RemoveChain of the zombie's chain = %+v, %v; want its 1 item and its task row", got, err)
	}
	if _, err := h.s.GetItem(h.ctx, ref); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("GetItem of the zombie's item after retention: %v, want ErrNotFound", err)
	}
}

// A ledger serves one Temporal: none until the first adoption, which
// stands — a later adoption of another cluster or namespace gets the
// first one back and changes nothing — and survives as written.
func testServedIsAdoptedOnce(h *h) {
	if sv, ok, err := h.s.Served(h.ctx); err != nil || ok {
		h.Fatalf("Served of a new ledger = %+v, %v, %v; want none", sv, ok, err)
	}
	if _, err := h.s.AdoptServed(h.ctx, ledger.Served{Namespace: "default"}); err == nil {
		h.Fatalf("AdoptServed without a cluster id succeeded; want an error")
	}
	if sv, ok, err := h.s.Served(h.ctx); err != nil || ok {
		h.Fatalf("Served after a refused adoption = %+v, %v, %v; want none", sv, ok, err)
	}
	first := ledger.Served{ClusterID: "cluster-a", Namespace: "default"}
	got, err := h.s.AdoptServed(h.ctx, first)
	want := ledger.Served{ClusterID: "cluster-a", Namespace: "default", AdoptedAt: Epoch}
	if err != nil || got != want {
		h.Fatalf("AdoptServed(%+v) = %+v, %v; want %+v", first, got, err, want)
	}
	h.clock.Advance(time.Minute)
	for _, other := range []ledger.Served{{ClusterID: "cluster-b", Namespace: "default"}, {ClusterID: "cluster-a", Namespace: "other"}, first} {
		if got, err := h.s.AdoptServed(h.ctx, other); err != nil || got != want {
			h.Fatalf("AdoptServed(%+v) after the first = %+v, %v; want the first, %+v", other, got, err, want)
		}
	}
	if got, ok, err := h.s.Served(h.ctx); err != nil || !ok || got != want {
		h.Fatalf("Served = %+v, %v, %v; want %+v", got, ok, err, want)
	}
}
