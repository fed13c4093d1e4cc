package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// Skew is how far the clocks of the skewed workers in RunClocks are off
// the ledger's, ahead and behind: more than Lease, so a store that read the
// worker's clock would decide every lease of these cases wrongly.
const Skew = 2 * time.Minute

// RunClocks runs the cases about workers whose clocks disagree with the
// ledger's (issue 14, item 7): a lease is live or expired by the ledger's
// clock alone, and every row is stamped by it, whatever the clock of the
// worker that asks.
//
// newDatabase prepares one fresh, empty database for t whose clock is
// ledgerNow, and returns open, which opens another store on it for a worker
// whose own clock is workerNow, the way that worker opens its ledger. For a
// store that decides by its database's clock (PostgreSQL), ledgerNow stands
// in for the database's clock, and workerNow is given where a worker gives
// its clock (ledgerdsn.Options.Now). For a store whose database is a file on
// the worker's own machine (SQLite), the worker's clock is the ledger's:
// open uses ledgerNow, since two clocks on one machine cannot disagree.
// open must be safe to call from several goroutines at once and must arrange
// for each store it returns to be closed when t ends. Subtests run one after
// another, never in parallel.
func RunClocks(t *testing.T, newDatabase func(t *testing.T, ledgerNow func() time.Time) (open func(workerNow func() time.Time) (ledger.Store, error))) {
	t.Helper()
	runCases(t, clockCases, func(h *h) {
		open := newDatabase(h.T, h.clock.Now)
		if open == nil {
			h.Fatal("newDatabase returned a nil open function")
		}
		h.openAt = func(skew time.Duration) ledger.Store {
			h.Helper()
			s, err := open(func() time.Time { return h.clock.Now().Add(skew) })
			if err != nil {
				h.Fatalf("open a store for a worker %v off the ledger's clock: %v", skew, err)
			}
			return s
		}
	})
}

var clockCases = []testCase{
	{"SkewedWorkerTakesNoLiveLeaseEarly", testSkewedWorkerTakesNoLiveLeaseEarly},
	{"SkewedWorkerKeepsNoLeaseLate", testSkewedWorkerKeepsNoLeaseLate},
	{"RowsAreStampedByTheLedgerClock", testRowsStampedByTheLedgerClock},
}

// A worker whose clock is ahead of the ledger's sees another's lease as it
// is: live until the ledger's clock passes its end. It may neither claim
// the operation over it (claimed or running) nor take it to reconcile.
func testSkewedWorkerTakesNoLiveLeaseEarly(h *h) {
	h.s = h.openAt(0)
	ahead := h.openAt(Skew)
	claimed, running := newOp("op-claimed", "task-1"), newOp("op-running", "task-1")
	h.claim("worker-a/1", claimed)
	c := h.claim("worker-a/1", running)
	h.markRunning(running.ID, c.Fence)
	h.clock.Advance(Lease - time.Second) // live for one more second on the ledger's clock
	for _, op := range []ledger.Operation{claimed, running} {
		before := h.get(op.ID)
		res, err := ahead.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-ahead/1", Lease: Lease})
		if err != nil || res.Status != ledger.InProgress {
			h.Fatalf("Claim of %s (%s, lease live for 1s more by the ledger's clock) by a worker %v ahead: %q, %v; want %q",
				op.ID, before.State, Skew, res.Status, err, ledger.InProgress)
		}
		_, err = ahead.TakeForReconcile(h.ctx, op.ID, "reconciler-ahead/1", Lease)
		if !errors.Is(err, ledger.ErrLeaseHeld) {
			h.Fatalf("TakeForReconcile of %s (lease live) by a worker %v ahead: %v, want ErrLeaseHeld", op.ID, Skew, err)
		}
		h.unchanged("a worker ahead of the ledger's clock", before)
	}
	// The holder, its lease still live, goes on under its fence.
	if err := h.s.Renew(h.ctx, running.ID, c.Fence, Lease); err != nil {
		h.Fatalf("Renew by the holder after the worker ahead looked: %v", err)
	}
}

// A worker whose clock is behind the ledger's sees a lease end when the
// ledger's clock passes it: another's is taken over (claimed) or must be
// reconciled (running), and its own can neither be renewed nor used to
// mark the operation running.
func testSkewedWorkerKeepsNoLeaseLate(h *h) {
	h.s = h.openAt(0)
	behind := h.openAt(-Skew)
	claimed, running := newOp("op-claimed", "task-1"), newOp("op-running", "task-1")
	h.claim("worker-a/1", claimed)
	c := h.claim("worker-a/1", running)
	h.markRunning(running.ID, c.Fence)
	own := newOp("op-own", "task-1")
	res, err := behind.Claim(h.ctx, ledger.ClaimRequest{Op: own, Owner: "worker-behind/1", Lease: Lease})
	if err != nil || res.Status != ledger.Claimed {
		h.Fatalf("Claim of a new operation by a worker %v behind: %q, %v", Skew, res.Status, err)
	}
	h.clock.Advance(Lease + time.Second) // every lease ended a second ago on the ledger's clock

	got, err := behind.Claim(h.ctx, ledger.ClaimRequest{Op: claimed, Owner: "worker-behind/1", Lease: Lease})
	if err != nil || got.Status != ledger.Claimed {
		h.Fatalf("Claim of a claimed operation whose lease ended by the ledger's clock, by a worker %v behind: %q, %v; want %q",
			Skew, got.Status, err, ledger.Claimed)
	}
	got, err = behind.Claim(h.ctx, ledger.ClaimRequest{Op: running, Owner: "worker-behind/1", Lease: Lease})
	if err != nil || got.Status != ledger.MustReconcile {
		h.Fatalf("Claim of a running operation whose lease ended by the ledger's clock, by a worker %v behind: %q, %v; want %q",
			Skew, got.Status, err, ledger.MustReconcile)
	}
	if _, err := behind.TakeForReconcile(h.ctx, running.ID, "reconciler-behind/1", Lease); err != nil {
		h.Fatalf("TakeForReconcile of a running operation whose lease ended by the ledger's clock, by a worker %v behind: %v", Skew, err)
	}

	before := h.get(own.ID)
	if err := behind.Renew(h.ctx, own.ID, res.Op.Fence, Lease); !errors.Is(err, ledger.ErrFenced) {
		h.Fatalf("Renew of its own lease, ended by the ledger's clock, by a worker %v behind: %v, want ErrFenced", Skew, err)
	}
	if err := behind.MarkRunning(h.ctx, own.ID, res.Op.Fence, refusedFacts); !errors.Is(err, ledger.ErrFenced) {
		h.Fatalf("MarkRunning under its own lease, ended by the ledger's clock, by a worker %v behind: %v, want ErrFenced", Skew, err)
	}
	h.unchanged("a worker behind the ledger's clock using its ended lease", before)
}

// Every row a skewed worker writes carries the ledger's time: created and
// updated when the ledger says, its lease ending the lease's length after
// the ledger's now.
func testRowsStampedByTheLedgerClock(h *h) {
	for _, skew := range []time.Duration{Skew, -Skew} {
		h.s = h.openAt(skew)
		op := newOp("op-stamped-"+skew.String(), "task-1")
		c := h.claim("worker/1", op)
		at := h.clock.Now()
		if !c.CreatedAt.Equal(at) || !c.UpdatedAt.Equal(at) || !c.LeaseExpiresAt.Equal(at.Add(Lease)) {
			h.Fatalf("a claim by a worker %v off: created %v, updated %v, lease until %v; want %v, %v, %v",
				skew, c.CreatedAt, c.UpdatedAt, c.LeaseExpiresAt, at, at, at.Add(Lease))
		}
		if d := diff(h.get(op.ID), c); d != "" {
			h.Fatalf("the claim by a worker %v off reads back with %s", skew, d)
		}
		at = h.clock.Advance(time.Second)
		if err := h.s.Renew(h.ctx, op.ID, c.Fence, Lease); err != nil {
			h.Fatal(err)
		}
		if got := h.get(op.ID); !got.UpdatedAt.Equal(at) || !got.LeaseExpiresAt.Equal(at.Add(Lease)) {
			h.Fatalf("a Renew by a worker %v off: updated %v, lease until %v; want %v, %v",
				skew, got.UpdatedAt, got.LeaseExpiresAt, at, at.Add(Lease))
		}
		at = h.clock.Advance(time.Second)
		h.markRunning(op.ID, c.Fence)
		if got := h.get(op.ID); !got.UpdatedAt.Equal(at) {
			h.Fatalf("MarkRunning by a worker %v off: updated %v, want %v", skew, got.UpdatedAt, at)
		}
	}
}
