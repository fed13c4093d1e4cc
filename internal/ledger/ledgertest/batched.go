package ledgertest

import (
	"bytes"
	"errors"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// The writes that do two things at once: a claim straight into RUNNING, a
// completion with its transcript items, a turn commit with its items. Each
// is one write of what two or more writes did before, and must leave the
// ledger exactly as they did.

// claimRunning claims op for owner straight into RUNNING and expects to get it.
func (h *h) claimRunning(owner string, op ledger.Operation) ledger.Operation {
	h.Helper()
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: owner, Lease: Lease, Running: true})
	if err != nil {
		h.Fatalf("Claim(%q, Running) by %q: %v", op.ID, owner, err)
	}
	if res.Status != ledger.Claimed {
		h.Fatalf("Claim(%q, Running) by %q: status %q, want %q (op %+v)", op.ID, owner, res.Status, ledger.Claimed, res.Op)
	}
	return res.Op
}

// A claim with Running leaves a new operation as a claim and MarkRunning
// with no facts would: RUNNING, its first attempt counted. Its lease
// running out makes it an operation to reconcile, never one to take over,
// and a Running claim that is not granted changes nothing.
func testClaimRunning(h *h) {
	op := newOp("op-running", "task-1")
	got := h.claimRunning("worker-a/1", op)
	now := h.clock.Now()
	want := op
	want.State = capstan.OutcomeRunning
	want.LeaseOwner = "worker-a/1"
	want.LeaseExpiresAt = now.Add(Lease)
	want.Fence = 1
	want.AttemptCount = 1
	want.CreatedAt, want.UpdatedAt = now, now
	if d := diff(got, want); d != "" {
		h.Fatalf("Claim(Running) returned %s", d)
	}
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("Get after Claim(Running): %s", d)
	}

	// Held live by worker-a: another Running claim is told InProgress.
	before := h.get(op.ID)
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-b/1", Lease: Lease, Running: true})
	if err != nil || res.Status != ledger.InProgress {
		h.Fatalf("Claim(Running) of a live RUNNING operation: %q, %v; want %q", res.Status, err, ledger.InProgress)
	}
	h.unchanged("a refused Claim(Running)", before)

	// The holder died: after the lease, only a reconciler may decide.
	h.clock.Advance(Lease)
	before = h.get(op.ID)
	res, err = h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-b/1", Lease: Lease, Running: true})
	if err != nil || res.Status != ledger.MustReconcile {
		h.Fatalf("Claim(Running) after the lease ran out: %q, %v; want %q", res.Status, err, ledger.MustReconcile)
	}
	h.unchanged("a Claim(Running) that must reconcile", before)
}

// A Running reclaim of an ABSENT operation takes the next fence, clears the
// earlier attempt's outcome and facts, and counts one more attempt.
func testReclaimRunning(h *h) {
	op := newOp("op-rerun", "task-1")
	c := h.claim("worker-a/1", op)
	h.markRunningWith(op.ID, c.Fence, []byte(`{"head_sha":"abc"}`))
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeAbsent, Error: "connection refused"})
	h.clock.Advance(time.Second)
	got := h.claimRunning("worker-b/1", op)
	if got.Fence != c.Fence+1 || got.State != capstan.OutcomeRunning || got.LeaseOwner != "worker-b/1" || got.AttemptCount != 2 {
		h.Fatalf("Running reclaim: fence %d state %s owner %q attempts %d, want fence %d RUNNING worker-b/1 attempts 2",
			got.Fence, got.State, got.LeaseOwner, got.AttemptCount, c.Fence+1)
	}
	if got.Error != "" || got.Facts != nil {
		h.Fatalf("Running reclaim kept the earlier attempt's error %q or facts %q", got.Error, got.Facts)
	}
	if d := diff(h.get(op.ID), got); d != "" {
		h.Fatalf("Get after the Running reclaim: %s", d)
	}
	// The successful attempt completes under its fence as after MarkRunning.
	h.complete(ledger.Completion{ID: op.ID, Fence: got.Fence, State: capstan.OutcomeSucceeded, ExternalID: "e-1"})
	h.expectStatus("worker-c/1", op, ledger.AlreadySucceeded)
}

// A Running claim that carries facts records them as MarkRunning(facts)
// would: on a new operation, and on a reclaim of a released one, whose
// earlier facts it replaces. Facts without Running are refused, nothing
// written; a Running claim with facts that is not granted changes nothing.
func testClaimRunningRecordsFacts(h *h) {
	facts := []byte(`{"from_sha":"0123456789abcdef0123456789abcdef01234567"}`)
	op := newOp("op-facts", "task-1")
	_, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-a/1", Lease: Lease, Facts: facts})
	if err == nil {
		h.Fatalf("Claim with facts and without Running succeeded, want it refused")
	}
	if _, err := h.s.Get(h.ctx, op.ID); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("Get after a refused Claim with facts: %v, want ErrNotFound", err)
	}

	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-a/1", Lease: Lease, Running: true, Facts: facts})
	if err != nil || res.Status != ledger.Claimed {
		h.Fatalf("Claim(Running, facts) = %q, %v; want %q", res.Status, err, ledger.Claimed)
	}
	if got := h.get(op.ID); got.State != capstan.OutcomeRunning || got.AttemptCount != 1 || !bytes.Equal(got.Facts, facts) {
		h.Fatalf("after Claim(Running, facts): state %s attempts %d facts %q; want RUNNING, 1, %q", got.State, got.AttemptCount, got.Facts, facts)
	}
	if d := diff(h.get(op.ID), res.Op); d != "" {
		h.Fatalf("Claim(Running, facts) returned what Get does not show: %s", d)
	}

	// Held live: another attempt's facts are not written.
	before := h.get(op.ID)
	other := []byte(`{"from_sha":"fedcba9876543210fedcba9876543210fedcba98"}`)
	res, err = h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-b/1", Lease: Lease, Running: true, Facts: other})
	if err != nil || res.Status != ledger.InProgress {
		h.Fatalf("Claim(Running, facts) of a live RUNNING operation: %q, %v; want %q", res.Status, err, ledger.InProgress)
	}
	h.unchanged("a refused Claim(Running, facts)", before)

	// Released (nothing was sent): the next attempt's facts replace them.
	h.complete(ledger.Completion{ID: op.ID, Fence: res.Op.Fence, State: capstan.OutcomeAbsent, Error: "connection refused"})
	h.clock.Advance(time.Second)
	res, err = h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-b/1", Lease: Lease, Running: true, Facts: other})
	if err != nil || res.Status != ledger.Claimed {
		h.Fatalf("Claim(Running, facts) of an ABSENT operation = %q, %v; want %q", res.Status, err, ledger.Claimed)
	}
	if got := h.get(op.ID); got.Fence != 2 || got.AttemptCount != 2 || !bytes.Equal(got.Facts, other) {
		h.Fatalf("after the reclaim: fence %d attempts %d facts %q; want 2, 2, %q", got.Fence, got.AttemptCount, got.Facts, other)
	}
}

// A completion's items are stored with it, as PutItem stores them; a
// completion refused for its stale fence stores none of them.
func testCompleteStoresItems(h *h) {
	op := newOp("op-items", "task-1")
	c := h.claimRunning("worker-a/1", op)
	zombie := []byte(`{"role":"tool","content":"written by a zombie"}`)
	err := h.s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: c.Fence + 1, State: capstan.OutcomeFailed, Items: [][]byte{zombie}})
	h.expectErrIs("Complete with a stale fence", err, ledger.ErrFenced, op.ID)
	if _, err := h.s.GetItem(h.ctx, ledger.ItemRef(zombie)); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("GetItem of a refused completion's item: %v, want ErrNotFound", err)
	}

	item := []byte(`{"role":"tool","tool_call_id":"call_1","content":"{\"number\":42}"}`)
	h.complete(ledger.Completion{ID: op.ID, Fence: c.Fence, State: capstan.OutcomeSucceeded, ExternalID: "42", Items: [][]byte{item, {}}})
	for _, data := range [][]byte{item, {}} {
		if got, err := h.s.GetItem(h.ctx, ledger.ItemRef(data)); err != nil || !bytes.Equal(got, data) {
			h.Fatalf("GetItem of an item completed with the operation = %q, %v; want %q", got, err, data)
		}
	}
}

// A turn's items are stored with its commit; a later commit of the same
// turn still gets the first output back.
func testCommitTurnStoresItems(h *h) {
	msg, manifest := []byte(`{"role":"assistant","content":"done"}`), []byte(`{"items":["sha256:00"]}`)
	first := []byte(`{"text":"done"}`)
	got, err := h.s.CommitTurn(h.ctx, "T/t1", first, msg, manifest)
	if err != nil || !bytes.Equal(got, first) {
		h.Fatalf("CommitTurn with items = %q, %v; want the output back", got, err)
	}
	for _, data := range [][]byte{msg, manifest} {
		if got, err := h.s.GetItem(h.ctx, ledger.ItemRef(data)); err != nil || !bytes.Equal(got, data) {
			h.Fatalf("GetItem of an item committed with the turn = %q, %v; want %q", got, err, data)
		}
	}
	got, err = h.s.CommitTurn(h.ctx, "T/t1", []byte(`{"text":"a zombie's answer"}`), msg, []byte(`{"role":"assistant","content":"zombie"}`))
	if err != nil || !bytes.Equal(got, first) {
		h.Fatalf("second CommitTurn with items = %q, %v; want the first output %q", got, err, first)
	}
}
