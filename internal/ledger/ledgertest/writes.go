package ledgertest

import (
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// The zombie case (docs/design.md §5.3): A claims and stalls before sending; its
// lease expires; B takes over, sends and records success. When A wakes up,
// every write it attempts with its old fence fails with ErrFenced and B's
// record survives byte for byte.
func testZombie(h *h) {
	op := newOp("op-zombie", "task-1")
	a := h.claim("worker-a/1", op)
	h.clock.Advance(Lease + time.Second)
	b := h.claim("worker-b/1", op)
	if b.Fence <= a.Fence {
		h.Fatalf("successor fence %d, want > %d", b.Fence, a.Fence)
	}
	zombie := func(when string) {
		h.Helper()
		survivor := h.get(op.ID)
		h.expectErrIs("zombie MarkRunning "+when, h.s.MarkRunning(h.ctx, op.ID, a.Fence, refusedFacts), ledger.ErrFenced, op.ID)
		for _, st := range []capstan.Outcome{capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeUnknown, capstan.OutcomeAbsent, capstan.OutcomeNeedsHuman} {
			err := h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: a.Fence, State: st, ExternalID: "pr/43", Result: []byte("by A"), Error: "zombie"})
			h.expectErrIs("zombie Complete "+string(st)+" "+when, err, ledger.ErrFenced, op.ID)
		}
		h.expectErrIs("zombie Release "+when, h.s.Release(h.ctx, op.ID, a.Fence), ledger.ErrFenced, op.ID)
		h.unchanged("the zombie "+when, survivor)
	}
	zombie("while the successor holds the claim")
	h.markRunning(b.ID, b.Fence)
	zombie("while the successor is running")
	h.complete(ledger.Completion{ID: b.ID, Fence: b.Fence, State: capstan.OutcomeSucceeded, ExternalID: "pr/42", Result: []byte("by B")})
	h.clock.Advance(time.Second)
	zombie("after the successor succeeded")
	got := h.expectStatus("worker-a/1", op, ledger.AlreadySucceeded)
	if got.ExternalID != "pr/42" || string(got.Result) != "by B" {
		h.Fatalf("stored outcome %q / %q, want the successor's", got.ExternalID, got.Result)
	}
}

// A RUNNING attempt is lost; the reconciler confirms the effect absent and
// records it under the operation's fence; a new claim sends again and
// succeeds. A late write by the lost attempt cannot touch the new record.
func testZombieAfterReconcile(h *h) {
	op := newOp("op-zombie-reconciled", "task-1")
	a := h.claim("worker-a/1", op)
	h.markRunning(op.ID, a.Fence)
	h.clock.Advance(Lease + time.Second)
	seen := h.expectStatus("worker-b/1", op, ledger.MustReconcile)
	h.complete(ledger.Completion{ID: op.ID, Fence: seen.Fence, State: capstan.OutcomeAbsent})
	c := h.claim("worker-b/1", op)
	h.succeed(c, "pr/7", []byte("by B"))
	survivor := h.get(op.ID)
	if survivor.AttemptCount != 2 {
		h.Fatalf("attempt count %d, want 2", survivor.AttemptCount)
	}

	err := h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: a.Fence, State: capstan.OutcomeSucceeded, ExternalID: "pr/6"})
	h.expectErrIs("late Complete by the lost attempt", err, ledger.ErrFenced, op.ID)
	h.unchanged("the lost attempt", survivor)
}

// MarkRunning needs CLAIMED, the current fence and a live lease; otherwise it
// is ErrFenced and counts nothing.
func testMarkRunningRules(h *h) {
	op := newOp("op-run", "task-1")
	c := h.claim("worker-a/1", op)
	h.expectErrIs("MarkRunning with a future fence", h.s.MarkRunning(h.ctx, op.ID, c.Fence+1, refusedFacts), ledger.ErrFenced, op.ID)
	h.unchanged("a fenced MarkRunning", c)

	h.clock.Advance(time.Second)
	h.markRunning(op.ID, c.Fence)
	running := h.get(op.ID)
	if running.State != capstan.OutcomeRunning || running.AttemptCount != 1 || running.Fence != c.Fence ||
		!running.UpdatedAt.Equal(h.clock.Now()) || running.LeaseOwner != "worker-a/1" {
		h.Fatalf("after MarkRunning: %+v", running)
	}
	h.expectErrIs("MarkRunning twice", h.s.MarkRunning(h.ctx, op.ID, c.Fence, refusedFacts), ledger.ErrFenced, op.ID)
	h.unchanged("a second MarkRunning", running)

	late := newOp("op-run-late", "task-1")
	lc := h.claim("worker-a/1", late)
	h.clock.Advance(Lease)
	h.expectErrIs("MarkRunning after the lease expired", h.s.MarkRunning(h.ctx, late.ID, lc.Fence, refusedFacts), ledger.ErrFenced, late.ID)
	h.unchanged("MarkRunning on an expired lease", lc)
}

// Complete writes the outcome under the current fence from CLAIMED, RUNNING,
// UNKNOWN or NEEDS_HUMAN; a stale fence, an ended claim or a non-final target
// state writes nothing.
func testCompleteRules(h *h) {
	op := newOp("op-complete", "task-1")
	c := h.claim("worker-a/1", op)
	h.markRunning(op.ID, c.Fence)
	before := h.get(op.ID)
	err := h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: c.Fence - 1, State: capstan.OutcomeSucceeded, ExternalID: "x"})
	h.expectErrIs("Complete with a stale fence", err, ledger.ErrFenced, op.ID)
	for _, st := range []capstan.Outcome{capstan.OutcomeClaimed, capstan.OutcomeRunning, capstan.OutcomeDeclared, "BOGUS"} {
		if err := h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: c.Fence, State: st}); err == nil {
			h.Errorf("Complete to %q succeeded, want an error", st)
		}
	}
	h.unchanged("refused completions", before)

	// Timeout after the request was written: UNKNOWN, then the reconciler
	// finds nothing conclusive, then a person confirms it happened.
	h.clock.Advance(time.Second)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeUnknown, Error: "timeout"})
	h.clock.Advance(time.Second)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeNeedsHuman, Error: "two candidate pull requests"})
	h.clock.Advance(time.Second)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeSucceeded, ExternalID: "pr/9", Result: []byte(`{"recovered":true}`)})
	want := before
	want.State = capstan.OutcomeSucceeded
	want.ExternalID, want.Result, want.Error = "pr/9", []byte(`{"recovered":true}`), ""
	want.LeaseExpiresAt = time.Time{}
	want.UpdatedAt = h.clock.Now()
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("after completion: %s", d)
	}

	err = h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeFailed, Error: "late"})
	h.expectErrIs("Complete after SUCCEEDED", err, ledger.ErrFenced, op.ID)
	h.unchanged("Complete after SUCCEEDED", want)
}

// Release hands back an unsent claim: ABSENT, no lease; the next claim gets
// the next fence and the released fence is dead.
func testReleaseThenReclaim(h *h) {
	op := newOp("op-release", "task-1")
	c := h.claim("worker-a/1", op)
	h.expectErrIs("Release with a stale fence", h.s.Release(h.ctx, op.ID, c.Fence+1), ledger.ErrFenced, op.ID)
	h.unchanged("a fenced Release", c)
	h.clock.Advance(time.Second)
	if err := h.s.Release(h.ctx, op.ID, c.Fence); err != nil {
		h.Fatalf("Release: %v", err)
	}
	want := c
	want.State = capstan.OutcomeAbsent
	want.LeaseOwner, want.LeaseExpiresAt = "", time.Time{}
	want.UpdatedAt = h.clock.Now()
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("after Release: %s", d)
	}
	h.expectErrIs("Release twice", h.s.Release(h.ctx, op.ID, c.Fence), ledger.ErrFenced, op.ID)
	h.expectErrIs("MarkRunning after Release", h.s.MarkRunning(h.ctx, op.ID, c.Fence, refusedFacts), ledger.ErrFenced, op.ID)

	next := h.claim("worker-b/1", op)
	if next.Fence != c.Fence+1 {
		h.Fatalf("claim after Release: fence %d, want %d", next.Fence, c.Fence+1)
	}
	h.succeed(next, "pr/1", nil)
}

// An operation that may have been sent (RUNNING, UNKNOWN, NEEDS_HUMAN) is
// never released, even by its holder.
func testReleaseRefusesSent(h *h) {
	op := newOp("op-no-release", "task-1")
	c := h.claim("worker-a/1", op)
	h.markRunning(op.ID, c.Fence)
	for _, st := range []capstan.Outcome{capstan.OutcomeRunning, capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman} {
		if st != capstan.OutcomeRunning {
			h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: st})
		}
		before := h.get(op.ID)
		if err := h.s.Release(h.ctx, op.ID, c.Fence); err == nil {
			h.Fatalf("Release of a %s operation succeeded, want an error", st)
		}
		h.unchanged("Release of a "+string(st)+" operation", before)
	}
}

// Each MarkRunning counts one attempt, across claims; claims alone count
// nothing.
func testAttemptCounting(h *h) {
	op := newOp("op-attempts", "task-1")
	for i := 1; i <= 3; i++ {
		c := h.claim("worker-a/1", op)
		if c.AttemptCount != i-1 {
			h.Fatalf("claim %d: attempt count %d, want %d", i, c.AttemptCount, i-1)
		}
		h.markRunning(op.ID, c.Fence)
		if got := h.get(op.ID).AttemptCount; got != i {
			h.Fatalf("after MarkRunning %d: attempt count %d", i, got)
		}
		h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeFailed, Error: "503"})
	}
	c := h.claim("worker-a/1", op)
	if err := h.s.Release(h.ctx, op.ID, c.Fence); err != nil {
		h.Fatal(err)
	}
	if got := h.get(op.ID); got.AttemptCount != 3 || got.Fence != 4 {
		h.Fatalf("after release: attempt count %d fence %d, want 3 and 4", got.AttemptCount, got.Fence)
	}
}

// Every call on an unknown id is ErrNotFound, wrapped with the id.
func testNotFound(h *h) {
	const id = "op-missing"
	_, err := h.s.Get(h.ctx, id)
	h.expectErrIs("Get", err, ledger.ErrNotFound, id)
	h.expectErrIs("MarkRunning", h.s.MarkRunning(h.ctx, id, 1, refusedFacts), ledger.ErrNotFound, id)
	h.expectErrIs("Complete", h.s.Complete(h.ctx, ledger.Completion{ID: id, Fence: 1, State: capstan.OutcomeSucceeded}), ledger.ErrNotFound, id)
	h.expectErrIs("Release", h.s.Release(h.ctx, id, 1), ledger.ErrNotFound, id)
	for _, err := range []error{h.s.MarkRunning(h.ctx, id, 1, refusedFacts), h.s.Release(h.ctx, id, 1)} {
		if errors.Is(err, ledger.ErrFenced) {
			h.Fatalf("unknown id reported as fenced: %v", err)
		}
	}
}
