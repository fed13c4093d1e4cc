package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// RunOldRows runs the cases of a ledger that holds rows written before the
// one vocabulary, whose state column has the old upper-case spellings
// (SUCCEEDED, NEEDS_HUMAN, …): every store reads them as today's outcomes
// and applies the same rules to them, so a pool upgraded in place carries on
// with the operations its older workers recorded.
//
// newStore returns a fresh, empty store, as for Run, and rewrite, which sets
// the state column of operation id to state exactly as given, the way an
// older release wrote it.
func RunOldRows(t *testing.T, newStore func(t *testing.T, now func() time.Time) (s ledger.Store, rewrite func(id, state string))) {
	t.Helper()
	runCases(t, oldRowCases, func(h *h) {
		if h.s, h.rewrite = newStore(h.T, h.clock.Now); h.s == nil || h.rewrite == nil {
			h.Fatal("newStore returned a nil store or rewrite")
		}
	})
}

var oldRowCases = []testCase{
	{"OldStatesReadAsTodays", testOldStatesRead},
	{"ClaimRulesReadOldStates", testOldStatesClaim},
	{"TakeForReconcileReadsOldStates", testOldStatesTake},
	{"WritesUnderOldStates", testOldStatesWrites},
}

// oldStates are the states an older release wrote, and what they mean.
var oldStates = []struct {
	old  string
	want capstan.Outcome
}{
	{"DECLARED", capstan.OutcomeDeclared}, {"CLAIMED", capstan.OutcomeClaimed}, {"RUNNING", capstan.OutcomeRunning},
	{"SUCCEEDED", capstan.OutcomeSucceeded}, {"FAILED", capstan.OutcomeFailed}, {"UNKNOWN", capstan.OutcomeUnknown},
	{"ABSENT", capstan.OutcomeAbsent}, {"NEEDS_HUMAN", capstan.OutcomeNeedsHuman},
}

// oldRow brings a new operation to state through the store's own methods,
// then rewrites its state column to old, the spelling an older release
// would have written for that state. It returns the row as the store read
// it before the rewrite.
func (h *h) oldRow(id string, state capstan.Outcome, old string) ledger.Operation {
	h.Helper()
	op := newOp(id, "task-old")
	c := h.claim("old-worker/1", op)
	switch state {
	case capstan.OutcomeDeclared, capstan.OutcomeClaimed:
	case capstan.OutcomeAbsent:
		if err := h.s.Release(h.ctx, id, c.Fence); err != nil {
			h.Fatalf("Release(%q): %v", id, err)
		}
	case capstan.OutcomeRunning:
		h.markRunning(id, c.Fence)
	case capstan.OutcomeSucceeded:
		h.succeed(c, "https://github.example/acme/payments/pull/7", []byte(`{"number":7}`))
	default:
		h.markRunning(id, c.Fence)
		h.complete(ledger.Completion{ID: id, Fence: c.Fence, State: state, Error: "recorded by an older release"})
	}
	before := h.get(id)
	if state == capstan.OutcomeDeclared {
		before.State = capstan.OutcomeDeclared // no method writes it; the rewrite makes it
	}
	if before.State != state {
		h.Fatalf("%s: the store made it %s, want %s", id, before.State, state)
	}
	h.rewrite(id, old)
	return before
}

// Get and ListByTask read each old spelling as the outcome it meant, and
// nothing else of the row changes.
func testOldStatesRead(h *h) {
	want := map[string]ledger.Operation{}
	for _, s := range oldStates {
		id := "op-old-" + s.old
		want[id] = h.oldRow(id, s.want, s.old)
		if d := diff(h.get(id), want[id]); d != "" {
			h.Errorf("Get of a row written as %s: %s", s.old, d)
		}
	}
	ops, err := h.s.ListByTask(h.ctx, "task-old")
	if err != nil {
		h.Fatal(err)
	}
	if len(ops) != len(oldStates) {
		h.Fatalf("ListByTask returned %d operations, want %d", len(ops), len(oldStates))
	}
	for _, op := range ops {
		if d := diff(op, want[op.ID]); d != "" {
			h.Errorf("ListByTask's %s: %s", op.ID, d)
		}
	}
}

// A claim decides on an old row as on today's: a success is returned, not
// performed again; what was not sent or definitely failed is taken; what may
// have been sent must be reconciled first.
func testOldStatesClaim(h *h) {
	for _, s := range oldStates {
		id := "op-claim-" + s.old
		before := h.oldRow(id, s.want, s.old)
		if s.want == capstan.OutcomeClaimed || s.want == capstan.OutcomeRunning {
			h.clock.Advance(Lease) // the older worker died holding it
		}
		res := h.claimAs("new-worker/1", newOp(id, "task-old"), Lease)
		switch s.want {
		case capstan.OutcomeSucceeded:
			if res.Status != ledger.AlreadySucceeded || res.Op.State != capstan.OutcomeSucceeded || string(res.Op.Result) != string(before.Result) {
				h.Errorf("claim of %s: %s, op %s with result %q; want already_succeeded with the stored result", s.old, res.Status, res.Op.State, res.Op.Result)
			}
		case capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman, capstan.OutcomeRunning:
			if res.Status != ledger.MustReconcile || res.Op.State != s.want {
				h.Errorf("claim of %s: %s, op %s; want must_reconcile, op %s", s.old, res.Status, res.Op.State, s.want)
			}
		default: // declared, claimed (expired), absent, failed
			if res.Status != ledger.Claimed || res.Op.State != capstan.OutcomeClaimed || res.Op.LeaseOwner != "new-worker/1" {
				h.Errorf("claim of %s: %s, op %s held by %q; want claimed by new-worker/1", s.old, res.Status, res.Op.State, res.Op.LeaseOwner)
			}
		}
		h.clock.Advance(time.Second)
	}
}

// TakeForReconcile takes an old row whose outcome may be unknown, under the
// next fence, and the verdict written under that fence reads back in
// today's words; an old row whose outcome is known is settled.
func testOldStatesTake(h *h) {
	for _, s := range oldStates {
		id := "op-take-" + s.old
		before := h.oldRow(id, s.want, s.old)
		if s.want == capstan.OutcomeClaimed || s.want == capstan.OutcomeRunning {
			h.clock.Advance(Lease)
		}
		op, err := h.s.TakeForReconcile(h.ctx, id, "reconciler/1", Lease)
		switch s.want {
		case capstan.OutcomeDeclared, capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeAbsent:
			if !errors.Is(err, ledger.ErrSettled) || op.State != s.want {
				h.Errorf("take of %s: %v, op %s; want ErrSettled with the op as %s", s.old, err, op.State, s.want)
			}
			continue
		}
		if err != nil {
			h.Errorf("take of %s: %v, want it taken", s.old, err)
			continue
		}
		if op.State != s.want || op.Fence != before.Fence+1 || op.LeaseOwner != "reconciler/1" {
			h.Errorf("take of %s: op %s at fence %d held by %q; want %s at fence %d held by reconciler/1",
				s.old, op.State, op.Fence, op.LeaseOwner, s.want, before.Fence+1)
		}
		h.complete(ledger.Completion{ID: id, Fence: op.Fence, State: capstan.OutcomeSucceeded, ExternalID: "found"})
		if got := h.get(id); got.State != capstan.OutcomeSucceeded || got.ExternalID != "found" {
			h.Errorf("after the verdict on %s: op %s %q, want succeeded \"found\"", s.old, got.State, got.ExternalID)
		}
	}
}

// The writes of an attempt that an older worker's claim began — mark
// running, renew, complete, release — go through on the old row.
func testOldStatesWrites(h *h) {
	claimed := h.oldRow("op-write-claimed", capstan.OutcomeClaimed, "CLAIMED")
	if err := h.s.Renew(h.ctx, claimed.ID, claimed.Fence, Lease); err != nil {
		h.Errorf("Renew of a CLAIMED row: %v", err)
	}
	h.markRunning(claimed.ID, claimed.Fence)
	h.complete(ledger.Completion{ID: claimed.ID, Fence: claimed.Fence, State: capstan.OutcomeFailed, Error: "422"})
	if got := h.get(claimed.ID); got.State != capstan.OutcomeFailed {
		h.Errorf("CLAIMED row run and completed: %s, want failed", got.State)
	}

	running := h.oldRow("op-write-running", capstan.OutcomeRunning, "RUNNING")
	if err := h.s.Renew(h.ctx, running.ID, running.Fence, Lease); err != nil {
		h.Errorf("Renew of a RUNNING row: %v", err)
	}
	h.complete(ledger.Completion{ID: running.ID, Fence: running.Fence, State: capstan.OutcomeUnknown, Error: "reset"})
	if got := h.get(running.ID); got.State != capstan.OutcomeUnknown {
		h.Errorf("RUNNING row completed unknown: %s", got.State)
	}
	if err := h.s.Release(h.ctx, running.ID, running.Fence); err == nil {
		h.Error("Release of an operation that may have been sent succeeded")
	}

	released := h.oldRow("op-write-release", capstan.OutcomeClaimed, "CLAIMED")
	if err := h.s.Release(h.ctx, released.ID, released.Fence); err != nil {
		h.Errorf("Release of a CLAIMED row: %v", err)
	}
	if got := h.get(released.ID); got.State != capstan.OutcomeAbsent {
		h.Errorf("CLAIMED row released: %s, want absent", got.State)
	}
}
