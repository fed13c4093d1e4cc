package ledgertest

import (
	"bytes"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// Facts are what an attempt learned just before it sent its request; they
// are there for the reconciler of that very attempt. So MarkRunning writes
// them, byte for byte; nothing that records the attempt's outcome or hands
// it to a reconciler (Complete to any state, TakeForReconcile, Claim's
// MustReconcile and AlreadySucceeded answers) drops them; Get and
// ListByTask return them; and a new claim, whose attempt learns its own,
// clears them.
func testFactsRecordedAtMarkRunning(h *h) {
	first := []byte(`{"head_sha":"6dcb09b5b57875f334f61aebed695e2e4193db5e"}`)
	second := []byte(`{"head_sha":"aa218f56b14c9653891f9e74264a383fa43fefbd"}`)
	expectFacts := func(what string, op ledger.Operation, want []byte) {
		h.Helper()
		if !bytes.Equal(op.Facts, want) {
			h.Fatalf("%s: facts %q, want %q", what, op.Facts, want)
		}
	}

	op := newOp("op-facts", "task-facts")
	c := h.claim("worker-a/1", op)
	expectFacts("a new claim", c, nil)
	h.markRunningWith(op.ID, c.Fence, first)
	expectFacts("Get after MarkRunning", h.get(op.ID), first)

	// The answer is lost: the attempt records UNKNOWN.
	h.clock.Advance(time.Second)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeUnknown, Error: "connection reset"})
	expectFacts("Get after Complete(UNKNOWN)", h.get(op.ID), first)
	expectFacts("Claim's MustReconcile answer", h.expectStatus("worker-b/1", op, ledger.MustReconcile), first)

	// A reconciler takes it, cannot tell, and asks a person.
	h.clock.Advance(time.Second)
	taken := h.take(op.ID, "reconciler-b/1")
	expectFacts("TakeForReconcile's answer", taken, first)
	expectFacts("Get after TakeForReconcile", h.get(op.ID), first)
	h.complete(ledger.Completion{ID: op.ID, Fence: taken.Fence, State: capstan.OutcomeNeedsHuman, Error: "cannot tell"})
	expectFacts("Get after Complete(NEEDS_HUMAN)", h.get(op.ID), first)
	retaken := h.take(op.ID, "reconciler-c/1")
	expectFacts("TakeForReconcile of NEEDS_HUMAN", retaken, first)
	h.complete(ledger.Completion{ID: op.ID, Fence: retaken.Fence, State: capstan.OutcomeAbsent, Error: "a person saw nothing"})
	expectFacts("Get after the verdict ABSENT", h.get(op.ID), first)
	ops, err := h.s.ListByTask(h.ctx, "task-facts")
	if err != nil {
		h.Fatalf("ListByTask: %v", err)
	}
	if len(ops) != 1 {
		h.Fatalf("ListByTask: %d operations, want 1", len(ops))
	}
	expectFacts("ListByTask", ops[0], first)

	// Sent again: the new claim starts without facts, and its attempt
	// records its own, which survive its success.
	h.clock.Advance(time.Second)
	again := h.claim("worker-b/2", op)
	expectFacts("a reclaim", again, nil)
	expectFacts("Get after a reclaim", h.get(op.ID), nil)
	h.markRunningWith(op.ID, again.Fence, second)
	h.complete(ledger.Completion{ID: op.ID, Fence: again.Fence, State: capstan.OutcomeSucceeded, ExternalID: "pr/1"})
	expectFacts("Get after Complete(SUCCEEDED)", h.get(op.ID), second)
	expectFacts("Claim's AlreadySucceeded answer", h.expectStatus("worker-c/1", op, ledger.AlreadySucceeded), second)

	// An attempt that learned nothing records nothing.
	none := newOp("op-no-facts", "task-facts")
	nc := h.claim("worker-a/1", none)
	h.markRunningWith(none.ID, nc.Fence, nil)
	expectFacts("MarkRunning without facts", h.get(none.ID), nil)
}
