package ledgertest

import (
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// A new id is inserted CLAIMED at fence 1 with the caller's lease, and reads
// back exactly as Claim returned it.
func testClaimNew(h *h) {
	op := newOp("op-new", "task-1")
	got := h.claim("worker-a/1", op)
	now := h.clock.Now()
	want := op
	want.State = capstan.OutcomeClaimed
	want.LeaseOwner = "worker-a/1"
	want.LeaseExpiresAt = now.Add(Lease)
	want.Fence = 1
	want.CreatedAt, want.UpdatedAt = now, now
	if d := diff(got, want); d != "" {
		h.Fatalf("Claim returned %s", d)
	}
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("Get after Claim: %s", d)
	}
}

// A claim without an id, an owner or a positive lease is refused and creates
// nothing.
func testClaimValidation(h *h) {
	op := newOp("op-valid", "task-1")
	noID := op
	noID.ID = ""
	for _, req := range []ledger.ClaimRequest{
		{Op: noID, Owner: "w", Lease: Lease},
		{Op: op, Owner: "", Lease: Lease},
		{Op: op, Owner: "w", Lease: 0},
		{Op: op, Owner: "w", Lease: -time.Second},
	} {
		if _, err := h.s.Claim(h.ctx, req); err == nil {
			h.Errorf("Claim(id=%q owner=%q lease=%v) succeeded, want an error", req.Op.ID, req.Owner, req.Lease)
		}
	}
	if _, err := h.s.Get(h.ctx, op.ID); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("Get after refused claims: %v, want ErrNotFound", err)
	}
}

// Once SUCCEEDED, every later claim — by anyone, at any time — gets the stored
// result back and changes nothing.
func testReplayedSuccess(h *h) {
	op := newOp("op-done", "task-1")
	c := h.claim("worker-a/1", op)
	h.succeed(c, "https://github.example/acme/payments/pull/42", []byte(`{"number":42}`))
	h.clock.Advance(time.Hour)
	before := h.get(op.ID)
	for _, owner := range []string{"worker-a/1", "worker-b/7"} {
		got := h.expectStatus(owner, op, ledger.AlreadySucceeded)
		if d := diff(got, before); d != "" {
			h.Fatalf("AlreadySucceeded returned %s", d)
		}
		if string(got.Result) != `{"number":42}` || got.ExternalID != "https://github.example/acme/payments/pull/42" {
			h.Fatalf("AlreadySucceeded result %q / %q, want the stored ones", got.Result, got.ExternalID)
		}
	}
	h.unchanged("a replayed claim", before)
}

// The same id with another request hash is ErrConflict in every state, names
// the id, and changes nothing.
func testConflict(h *h) {
	op := newOp("op-conflict", "task-1")
	h.claim("worker-a/1", op)
	other := op
	other.RequestHash = "hash-of-another-request"
	check := func(when string) {
		h.Helper()
		before := h.get(op.ID)
		_, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: other, Owner: "worker-b/1", Lease: Lease})
		h.expectErrIs("Claim with another hash "+when, err, ledger.ErrConflict, op.ID)
		h.unchanged("a conflicting claim "+when, before)
	}
	check("while CLAIMED")
	h.clock.Advance(2 * Lease)
	check("after the lease expired")
	c := h.claim("worker-a/2", op)
	h.succeed(c, "ext", []byte("r"))
	check("after SUCCEEDED")
}

// While a live lease is held elsewhere — CLAIMED or RUNNING — another owner
// is told InProgress and sees the holder and its lease.
func testLiveLeaseElsewhere(h *h) {
	op := newOp("op-busy", "task-1")
	c := h.claim("worker-a/1", op)
	h.clock.Advance(Lease - time.Millisecond)
	got := h.expectStatus("worker-b/1", op, ledger.InProgress)
	if got.LeaseOwner != "worker-a/1" || !got.LeaseExpiresAt.Equal(c.LeaseExpiresAt) || got.Fence != 1 {
		h.Fatalf("InProgress returned owner %q lease %v fence %d, want the holder's", got.LeaseOwner, got.LeaseExpiresAt, got.Fence)
	}
	h.unchanged("an InProgress claim", c)

	op2 := newOp("op-busy-running", "task-1")
	c2 := h.claim("worker-a/1", op2)
	h.markRunning(op2.ID, c2.Fence)
	before := h.get(op2.ID)
	h.clock.Advance(Lease - 2*time.Millisecond)
	h.expectStatus("worker-b/1", op2, ledger.InProgress)
	// Even the holder does not get a RUNNING operation back: it may be on the wire.
	h.expectStatus("worker-a/1", op2, ledger.InProgress)
	h.unchanged("an InProgress claim on a RUNNING operation", before)
}

// The owner of a live CLAIMED claim may claim again: it gets a new fence, and
// the old fence is dead.
func testOwnerReclaims(h *h) {
	op := newOp("op-again", "task-1")
	first := h.claim("worker-a/1", op)
	h.clock.Advance(time.Second)
	second := h.claim("worker-a/1", op)
	if second.Fence != first.Fence+1 {
		h.Fatalf("re-claim fence %d, want %d", second.Fence, first.Fence+1)
	}
	if !second.LeaseExpiresAt.Equal(h.clock.Now().Add(Lease)) {
		h.Fatalf("re-claim lease expires %v, want %v", second.LeaseExpiresAt, h.clock.Now().Add(Lease))
	}
	h.expectErrIs("MarkRunning with the first fence", h.s.MarkRunning(h.ctx, op.ID, first.Fence, refusedFacts), ledger.ErrFenced, op.ID)
	h.markRunning(op.ID, second.Fence)
}

// A CLAIMED operation whose lease expired was never sent, so anyone may take
// it over with a higher fence. The lease ends at its expiry instant.
func testExpiredClaimed(h *h) {
	op := newOp("op-expired", "task-1")
	first := h.claim("worker-a/1", op)
	h.clock.Advance(Lease) // exactly at expiry: no longer live
	turn2 := op
	turn2.TurnID, turn2.ToolCallID = "task-1/t2", "call_retry"
	second := h.claim("worker-b/1", turn2)
	want := first
	want.LeaseOwner = "worker-b/1"
	want.LeaseExpiresAt = h.clock.Now().Add(Lease)
	want.Fence = first.Fence + 1
	want.TurnID, want.ToolCallID = turn2.TurnID, turn2.ToolCallID
	want.UpdatedAt = h.clock.Now()
	if d := diff(second, want); d != "" {
		h.Fatalf("reclaim returned %s", d)
	}
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("Get after reclaim: %s", d)
	}
}

// A RUNNING operation whose lease expired may have been sent: the claimer
// must reconcile, and nothing changes.
func testRunningExpired(h *h) {
	op := newOp("op-lost", "task-1")
	c := h.claim("worker-a/1", op)
	h.markRunning(op.ID, c.Fence)
	h.clock.Advance(Lease + time.Second)
	before := h.get(op.ID)
	for _, owner := range []string{"worker-b/1", "worker-a/1"} {
		got := h.expectStatus(owner, op, ledger.MustReconcile)
		if d := diff(got, before); d != "" {
			h.Fatalf("MustReconcile returned %s", d)
		}
	}
	h.unchanged("a MustReconcile claim", before)
}

// UNKNOWN and NEEDS_HUMAN always require reconciliation, whoever asks.
func testUnknownNeedsHuman(h *h) {
	for _, st := range []capstan.Outcome{capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman} {
		op := newOp("op-"+string(st), "task-1")
		c := h.claim("worker-a/1", op)
		h.markRunning(op.ID, c.Fence)
		h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: st, Error: "read timeout after the request was written"})
		before := h.get(op.ID)
		if before.State != st || before.Error == "" {
			h.Fatalf("after Complete(%s): state %s error %q", st, before.State, before.Error)
		}
		h.expectStatus("worker-a/1", op, ledger.MustReconcile)
		h.clock.Advance(10 * Lease)
		h.expectStatus("worker-b/1", op, ledger.MustReconcile)
		h.unchanged("a MustReconcile claim on "+string(st), before)
	}
}

// FAILED (definitely not done) and ABSENT (confirmed not done, or released)
// are claimed again with the next fence and a clean outcome.
func testFailedAbsentReclaimed(h *h) {
	for _, st := range []capstan.Outcome{capstan.OutcomeFailed, capstan.OutcomeAbsent} {
		op := newOp("op-reclaim-"+string(st), "task-1")
		c := h.claim("worker-a/1", op)
		h.markRunning(op.ID, c.Fence)
		h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: st, Error: "422 validation failed", ExternalID: "x", Result: []byte("r")})
		h.clock.Advance(time.Second)
		got := h.claim("worker-b/1", op)
		if got.Fence != c.Fence+1 || got.State != capstan.OutcomeClaimed || got.LeaseOwner != "worker-b/1" {
			h.Fatalf("reclaim of %s: fence %d state %s owner %q, want fence %d CLAIMED worker-b/1", st, got.Fence, got.State, got.LeaseOwner, c.Fence+1)
		}
		if got.Error != "" || got.ExternalID != "" || len(got.Result) != 0 {
			h.Fatalf("reclaim of %s kept the old outcome: error %q external %q result %q", st, got.Error, got.ExternalID, got.Result)
		}
		if got.AttemptCount != 1 {
			h.Fatalf("reclaim of %s: attempt count %d, want 1 (attempts are counted across claims)", st, got.AttemptCount)
		}
	}
}
