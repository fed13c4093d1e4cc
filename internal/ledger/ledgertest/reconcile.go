package ledgertest

import (
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// allCompletions is every state Complete may write.
var allCompletions = []capstan.Outcome{capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeUnknown,
	capstan.OutcomeAbsent, capstan.OutcomeNeedsHuman}

func (h *h) take(id, owner string) ledger.Operation {
	h.Helper()
	op, err := h.s.TakeForReconcile(h.ctx, id, owner, Lease)
	if err != nil {
		h.Fatalf("TakeForReconcile(%q) by %q: %v", id, owner, err)
	}
	return op
}

// unknownOp claims op, sends it and records its outcome as st (UNKNOWN or
// NEEDS_HUMAN); it returns the fence of the attempt.
func (h *h) unknownOp(owner string, op ledger.Operation, st capstan.Outcome) int64 {
	h.Helper()
	c := h.claim(owner, op)
	h.markRunning(op.ID, c.Fence)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: st, Error: "read timeout after the request was written"})
	return c.Fence
}

// zombieRefused fails unless every write with fence is ErrFenced and leaves
// the operation as it was.
func (h *h) zombieRefused(what, id string, fence int64) {
	h.Helper()
	before := h.get(id)
	h.expectErrIs(what+": MarkRunning", h.s.MarkRunning(h.ctx, id, fence, refusedFacts), ledger.ErrFenced, id)
	for _, st := range allCompletions {
		err := h.s.Complete(h.ctx, ledger.Completion{ID: id, Fence: fence, State: st,
			ExternalID: "pr/99", Result: []byte("by the zombie"), Error: "zombie"})
		h.expectErrIs(what+": Complete "+string(st), err, ledger.ErrFenced, id)
	}
	h.expectErrIs(what+": Release", h.s.Release(h.ctx, id, fence), ledger.ErrFenced, id)
	h.unchanged(what, before)
}

// An UNKNOWN or NEEDS_HUMAN operation is taken under the next fence with a
// lease for the reconciler; nothing else changes — not the state, not the
// attempt count, not the recorded error.
func testTakeForReconcile(h *h) {
	for _, st := range []capstan.Outcome{capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman} {
		op := newOp("op-take-"+string(st), "task-1")
		h.unknownOp("worker-a/1", op, st)
		h.clock.Advance(time.Second)
		before := h.get(op.ID)
		got := h.take(op.ID, "reconciler-b/1")
		want := before
		want.Fence = before.Fence + 1
		want.LeaseOwner = "reconciler-b/1"
		want.LeaseExpiresAt = h.clock.Now().Add(Lease)
		want.UpdatedAt = h.clock.Now()
		if d := diff(got, want); d != "" {
			h.Fatalf("TakeForReconcile of %s returned %s", st, d)
		}
		if d := diff(h.get(op.ID), want); d != "" {
			h.Fatalf("Get after TakeForReconcile of %s: %s", st, d)
		}
		// Taking does not make the operation claimable: it still must be
		// reconciled, and nobody may send it meanwhile.
		h.expectStatus("worker-c/1", op, ledger.MustReconcile)
		h.unchanged("a claim while the reconciler holds "+string(st), want)
	}
}

// The reconciler's verdict is written under its new fence; the attempt that
// sent the request, waking up with its old fence, can neither pre-empt the
// verdict nor overwrite it.
func testZombieCannotOverwriteVerdict(h *h) {
	op := newOp("op-verdict", "task-1")
	a := h.unknownOp("worker-a/1", op, capstan.OutcomeUnknown)
	r := h.take(op.ID, "reconciler-b/1")
	if r.Fence != a+1 {
		h.Fatalf("reconciler fence %d, want %d", r.Fence, a+1)
	}
	h.zombieRefused("the zombie while the reconciler looks", op.ID, a)
	h.clock.Advance(time.Second)
	h.complete(ledger.Completion{ID: op.ID, Fence: r.Fence, State: capstan.OutcomeSucceeded,
		ExternalID: "https://github.example/acme/payments/pull/42", Result: []byte(`{"recovered":true}`)})
	h.zombieRefused("the zombie after the verdict", op.ID, a)
	got := h.expectStatus("worker-a/1", op, ledger.AlreadySucceeded)
	if got.ExternalID != "https://github.example/acme/payments/pull/42" || string(got.Result) != `{"recovered":true}` {
		h.Fatalf("stored outcome %q / %q, want the reconciler's", got.ExternalID, got.Result)
	}
}

// A NEEDS_HUMAN written by a reconciler stands against the old fence, stays
// MustReconcile for every claimer, and a person's verdict is then recorded
// under yet another fence.
func testZombieCannotOverwriteNeedsHuman(h *h) {
	op := newOp("op-needs-human", "task-1")
	a := h.unknownOp("worker-a/1", op, capstan.OutcomeUnknown)
	r := h.take(op.ID, "reconciler-b/1")
	h.complete(ledger.Completion{ID: op.ID, Fence: r.Fence, State: capstan.OutcomeNeedsHuman,
		Error: "two pull requests carry the operation's marker"})
	h.zombieRefused("the zombie after NEEDS_HUMAN", op.ID, a)
	h.clock.Advance(10 * Lease)
	h.expectStatus("worker-a/1", op, ledger.MustReconcile)
	h.expectStatus("worker-c/1", op, ledger.MustReconcile)

	// A person decides: absent. The reconciler's fence is now stale too.
	p := h.take(op.ID, "reconciler-d/1")
	if p.Fence != r.Fence+1 || p.State != capstan.OutcomeNeedsHuman {
		h.Fatalf("take after NEEDS_HUMAN: fence %d state %s, want fence %d NEEDS_HUMAN", p.Fence, p.State, r.Fence+1)
	}
	h.complete(ledger.Completion{ID: op.ID, Fence: p.Fence, State: capstan.OutcomeAbsent, Error: "a person confirmed it absent"})
	h.zombieRefused("the first reconciler after the person's verdict", op.ID, r.Fence)
	next := h.claim("worker-e/1", op)
	if next.Fence != p.Fence+1 {
		h.Fatalf("claim after the person's absent: fence %d, want %d", next.Fence, p.Fence+1)
	}
}

// A RUNNING operation whose holder vanished is never handed to a second
// executor: the claim says MustReconcile, the reconciler takes it with the
// attempt count untouched, and the lost holder's fence is dead.
func testExpiredRunningIsReconciledNotReExecuted(h *h) {
	op := newOp("op-vanished", "task-1")
	a := h.claim("worker-a/1", op)
	h.markRunning(op.ID, a.Fence)
	h.clock.Advance(Lease) // the lease ends at its expiry instant
	h.expectStatus("worker-b/1", op, ledger.MustReconcile)
	before := h.get(op.ID)
	got := h.take(op.ID, "worker-b/1")
	if got.State != capstan.OutcomeRunning || got.Fence != a.Fence+1 || got.AttemptCount != 1 ||
		got.LeaseOwner != "worker-b/1" || !got.LeaseExpiresAt.Equal(h.clock.Now().Add(Lease)) {
		h.Fatalf("take of an expired RUNNING operation: %+v (was %+v)", got, before)
	}
	h.zombieRefused("the vanished holder", op.ID, a.Fence)
	h.expectStatus("worker-c/1", op, ledger.InProgress) // the reconciler's lease is live
	h.complete(ledger.Completion{ID: op.ID, Fence: got.Fence, State: capstan.OutcomeAbsent})
	if n := h.get(op.ID).AttemptCount; n != 1 {
		h.Fatalf("attempt count %d after reconciling, want 1: nothing was sent again", n)
	}

	// A CLAIMED operation whose lease expired may be taken as well.
	op2 := newOp("op-claimed-stalled", "task-1")
	c := h.claim("worker-a/1", op2)
	h.clock.Advance(Lease)
	got2 := h.take(op2.ID, "worker-b/1")
	if got2.State != capstan.OutcomeClaimed || got2.Fence != c.Fence+1 {
		h.Fatalf("take of an expired CLAIMED operation: state %s fence %d", got2.State, got2.Fence)
	}
	h.expectErrIs("MarkRunning by the stalled claimer", h.s.MarkRunning(h.ctx, op2.ID, c.Fence, refusedFacts), ledger.ErrFenced, op2.ID)
}

// A live lease — the executor's, or another reconciler's, even one held by
// the same owner name — refuses the take with the holder and the expiry, and
// changes nothing.
func testTakeRefusesLiveLease(h *h) {
	expectHeld := func(what string, id string, holder ledger.Operation) {
		h.Helper()
		before := h.get(id)
		_, err := h.s.TakeForReconcile(h.ctx, id, "reconciler-z/1", Lease)
		h.expectErrIs(what, err, ledger.ErrLeaseHeld, id)
		var held *ledger.LeaseHeldError
		if !errors.As(err, &held) {
			h.Fatalf("%s: error %v is not a *LeaseHeldError", what, err)
		}
		if held.ID != id || held.Owner != holder.LeaseOwner || !held.ExpiresAt.Equal(holder.LeaseExpiresAt) || held.State != before.State {
			h.Fatalf("%s: LeaseHeldError %+v, want holder %q until %v in %s", what, held, holder.LeaseOwner, holder.LeaseExpiresAt, before.State)
		}
		h.unchanged(what, before)
	}
	for _, running := range []bool{false, true} {
		op := newOp("op-live-claimed", "task-1")
		if running {
			op = newOp("op-live-running", "task-1")
		}
		c := h.claim("worker-a/1", op)
		if running {
			h.markRunning(op.ID, c.Fence)
		}
		h.clock.Advance(Lease - time.Millisecond)
		expectHeld("take under the executor's live lease", op.ID, c)
	}

	op := newOp("op-live-reconciler", "task-1")
	h.unknownOp("worker-a/1", op, capstan.OutcomeUnknown)
	r := h.take(op.ID, "reconciler-b/1")
	h.clock.Advance(Lease - time.Millisecond)
	expectHeld("take under another reconciler's live lease", op.ID, r)
	_, err := h.s.TakeForReconcile(h.ctx, op.ID, "reconciler-b/1", Lease)
	h.expectErrIs("take by the holder's own name", err, ledger.ErrLeaseHeld, op.ID)
	h.clock.Advance(time.Millisecond)
	if got := h.take(op.ID, "reconciler-c/1"); got.Fence != r.Fence+1 {
		h.Fatalf("take after the reconciler's lease expired: fence %d, want %d", got.Fence, r.Fence+1)
	}
	h.expectErrIs("the expired reconciler's verdict",
		h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: r.Fence, State: capstan.OutcomeAbsent}), ledger.ErrFenced, op.ID)
}

// An operation whose outcome the ledger knows is returned as it stands with
// ErrSettled, and nothing changes.
func testTakeSettled(h *h) {
	for _, st := range []capstan.Outcome{capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeAbsent} {
		op := newOp("op-settled-"+string(st), "task-1")
		c := h.claim("worker-a/1", op)
		h.markRunning(op.ID, c.Fence)
		h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: st, ExternalID: "ext-" + string(st), Result: []byte("r")})
		h.clock.Advance(time.Second)
		before := h.get(op.ID)
		got, err := h.s.TakeForReconcile(h.ctx, op.ID, "reconciler-b/1", Lease)
		h.expectErrIs("take of a "+string(st)+" operation", err, ledger.ErrSettled, op.ID)
		if d := diff(got, before); d != "" {
			h.Fatalf("take of a %s operation returned %s", st, d)
		}
		h.unchanged("take of a "+string(st)+" operation", before)
	}
}

// TakeForReconcile of an unknown id is ErrNotFound; without an owner or a
// positive lease it is refused and changes nothing.
func testTakeValidation(h *h) {
	_, err := h.s.TakeForReconcile(h.ctx, "op-missing", "reconciler-b/1", Lease)
	h.expectErrIs("take of an unknown id", err, ledger.ErrNotFound, "op-missing")
	op := newOp("op-take-valid", "task-1")
	h.unknownOp("worker-a/1", op, capstan.OutcomeUnknown)
	before := h.get(op.ID)
	for _, c := range []struct {
		id, owner string
		lease     time.Duration
	}{{"", "r", Lease}, {op.ID, "", Lease}, {op.ID, "r", 0}, {op.ID, "r", -time.Second}} {
		if _, err := h.s.TakeForReconcile(h.ctx, c.id, c.owner, c.lease); err == nil {
			h.Errorf("TakeForReconcile(%q, %q, %v) succeeded, want an error", c.id, c.owner, c.lease)
		}
	}
	h.unchanged("refused takes", before)
}
