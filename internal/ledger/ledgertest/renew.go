package ledgertest

import (
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// A renewed lease outlives the original: while the holder heartbeats, a
// second claimer sees the operation in progress, never free to reconcile.
// Once the holder stops renewing, the lease runs out as usual.
func testRenewKeepsTheLeaseLive(h *h) {
	op := newOp("op-slow", "task-1")
	c := h.claim("worker-a/1", op)
	h.markRunning(op.ID, c.Fence)
	for range 3 {
		h.clock.Advance(Lease - time.Second)
		if err := h.s.Renew(h.ctx, op.ID, c.Fence, Lease); err != nil {
			h.Fatalf("Renew of a live RUNNING lease: %v", err)
		}
		got := h.get(op.ID)
		if want := h.clock.Now().Add(Lease); !got.LeaseExpiresAt.Equal(want) || got.Fence != c.Fence || got.State != capstan.OutcomeRunning {
			h.Fatalf("after Renew: expires %s fence %d state %s; want %s, fence %d, RUNNING", got.LeaseExpiresAt, got.Fence, got.State, want, c.Fence)
		}
		h.expectStatus("worker-b/1", op, ledger.InProgress)
	}
	h.clock.Advance(Lease + time.Second)
	h.expectStatus("worker-b/1", op, ledger.MustReconcile)
	before := h.get(op.ID)
	if err := h.s.Renew(h.ctx, op.ID, c.Fence, Lease); !errors.Is(err, ledger.ErrFenced) {
		h.Fatalf("Renew of an expired lease: %v, want ErrFenced", err)
	}
	h.unchanged("a refused Renew", before)
}

// Renew refuses a stale fence and a settled operation; nothing changes.
func testRenewRules(h *h) {
	op := newOp("op-renew", "task-1")
	c := h.claim("worker-a/1", op)
	if err := h.s.Renew(h.ctx, op.ID, c.Fence, Lease); err != nil {
		h.Fatalf("Renew of a live CLAIMED lease: %v", err)
	}
	before := h.get(op.ID)
	if err := h.s.Renew(h.ctx, op.ID, c.Fence-1, Lease); !errors.Is(err, ledger.ErrFenced) {
		h.Fatalf("Renew with an old fence: %v, want ErrFenced", err)
	}
	h.unchanged("a Renew with an old fence", before)
	h.markRunning(op.ID, c.Fence)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeSucceeded, ExternalID: "x"})
	done := h.get(op.ID)
	if err := h.s.Renew(h.ctx, op.ID, c.Fence, Lease); !errors.Is(err, ledger.ErrFenced) {
		h.Fatalf("Renew of a SUCCEEDED operation: %v, want ErrFenced", err)
	}
	h.unchanged("a Renew of a settled operation", done)
	if err := h.s.Renew(h.ctx, "op-none", 1, Lease); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("Renew of an unknown operation: %v, want ErrNotFound", err)
	}
}
