package ledgertest

import (
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan"

	"github.com/capstanhq/capstan/internal/ledger"
)

// A policy decision is recorded once per operation id: the first record
// wins, stamped by the ledger's clock, and a later one (a repeated
// ExecuteTool, whose decision may differ) gets the first back, not
// created. A task's decisions list oldest first; a task without any lists
// an empty slice.
func testDecisionRecordedOnce(h *h) {
	first := ledger.Decision{OperationID: "acme:T1:~s:put:1", Tenant: "acme", TaskID: "T1", Tool: "github_put_file",
		Effect: "deny", Rule: "default/base-branch", Reason: "main is this task's base branch", Layer: "default", Refused: true}
	got, created, err := h.s.RecordDecision(h.ctx, first)
	want := first
	want.CreatedAt = Epoch
	if err != nil || !created || got != want {
		h.Fatalf("RecordDecision = %+v, %v, %v; want %+v, created", got, created, err, want)
	}
	h.clock.Advance(time.Second)
	other := first
	other.Effect, other.Rule, other.Reason, other.Refused, other.Layer = "allow", "default/allow", "allowed", false, "worker policy.yaml@0123456789ab"
	if got, created, err := h.s.RecordDecision(h.ctx, other); err != nil || created || got != want {
		h.Fatalf("RecordDecision again = %+v, %v, %v; want the first decision %+v, not created", got, created, err, want)
	}
	second := ledger.Decision{OperationID: "acme:T1:~s:branch:0", Tenant: "acme", TaskID: "T1", Tool: "github_create_branch",
		Effect: "allow", Rule: "default/allow", Reason: "allowed"}
	if _, created, err := h.s.RecordDecision(h.ctx, second); err != nil || !created {
		h.Fatalf("RecordDecision(%s) = %v, %v; want created", second.OperationID, created, err)
	}
	ds, err := h.s.Decisions(h.ctx, "T1")
	if err != nil || len(ds) != 2 || ds[0] != want || ds[1].OperationID != second.OperationID || ds[1].Refused || !ds[1].CreatedAt.Equal(Epoch.Add(time.Second)) {
		h.Fatalf("Decisions(T1) = %+v, %v; want the first, then %s a second later", ds, err, second.OperationID)
	}
	if ds, err := h.s.Decisions(h.ctx, "T2"); err != nil || ds == nil || len(ds) != 0 {
		h.Fatalf("Decisions(T2) = %#v, %v; want an empty slice", ds, err)
	}
	if _, _, err := h.s.RecordDecision(h.ctx, ledger.Decision{TaskID: "T1", Effect: "allow", Rule: "r"}); err == nil {
		h.Fatal("RecordDecision without an operation id succeeded")
	}
}

// allowDecision is the decision of a call the policy lets through, as
// ExecuteTool sends it with the claim: the identity fields left to the
// operation's.
func allowDecision() *ledger.Decision {
	return &ledger.Decision{Effect: "allow", Rule: "no-secrets", Reason: "allowed", Layer: "worker /etc/capstan/policy.yaml@0123456789ab"}
}

// A claim that carries the policy's decision records it in the claim's
// own write, with the operation's identity, stamped by the ledger's
// clock, as RecordDecision would; a later claim of the operation with the
// same decision finds it recorded (not created) and is decided as any
// claim.
func testClaimRecordsDecision(h *h) {
	op := newOp("op-decided", "T1")
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "w1/1", Lease: Lease, Running: true, Decision: allowDecision()})
	want := ledger.Decision{OperationID: op.ID, Tenant: op.Tenant, TaskID: op.TaskID, Tool: op.Kind,
		Effect: "allow", Rule: "no-secrets", Reason: "allowed", Layer: "worker /etc/capstan/policy.yaml@0123456789ab", CreatedAt: Epoch}
	if err != nil || res.Status != ledger.Claimed || res.Op.State != capstan.OutcomeRunning || res.Decision == nil || *res.Decision != want || !res.DecisionCreated {
		h.Fatalf("Claim with a decision = %+v (decision %+v), %v; want claimed running, decision %+v created", res, res.Decision, err, want)
	}
	if ds, err := h.s.Decisions(h.ctx, op.TaskID); err != nil || len(ds) != 1 || ds[0] != want {
		h.Fatalf("Decisions = %+v, %v; want [%+v]", ds, err, want)
	}
	h.complete(ledger.Completion{ID: op.ID, Fence: res.Op.Fence, State: capstan.OutcomeAbsent})
	h.clock.Advance(time.Second)
	again, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "w2/2", Lease: Lease, Decision: allowDecision()})
	if err != nil || again.Status != ledger.Claimed || again.Op.Fence != res.Op.Fence+1 || again.Decision == nil || *again.Decision != want || again.DecisionCreated {
		h.Fatalf("Claim again = %+v (decision %+v), %v; want claimed at fence %d, the first decision, not created", again, again.Decision, err, res.Op.Fence+1)
	}
	done := h.get(op.ID)
	h.complete(ledger.Completion{ID: op.ID, Fence: done.Fence, State: capstan.OutcomeSucceeded, ExternalID: "x"})
	replay, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "w3/3", Lease: Lease, Decision: allowDecision()})
	if err != nil || replay.Status != ledger.AlreadySucceeded || replay.Decision == nil || replay.DecisionCreated {
		h.Fatalf("Claim of a succeeded operation = %+v, %v; want already succeeded with its decision", replay, err)
	}
}

// When the operation already has another decision (a repeated ExecuteTool
// whose policy decided otherwise the first time), that one stands: the
// claim claims nothing, says DecidedOtherwise and returns it, and the
// operation is as it was — absent for a new id, unchanged for a known one.
func testClaimDecidedOtherwise(h *h) {
	op := newOp("op-refused-first", "T1")
	first := ledger.Decision{OperationID: op.ID, Tenant: op.Tenant, TaskID: op.TaskID, Tool: op.Kind,
		Effect: "deny", Rule: "default/base-branch", Reason: "main is this task's base branch", Layer: "default", Refused: true}
	if _, _, err := h.s.RecordDecision(h.ctx, first); err != nil {
		h.Fatalf("RecordDecision: %v", err)
	}
	first.CreatedAt = Epoch
	h.clock.Advance(time.Second)
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "w1/1", Lease: Lease, Running: true, Decision: allowDecision()})
	if err != nil || res.Status != ledger.DecidedOtherwise || res.Decision == nil || *res.Decision != first || res.DecisionCreated {
		h.Fatalf("Claim with another decision = %+v (decision %+v), %v; want decided otherwise, %+v", res, res.Decision, err, first)
	}
	if _, err := h.s.Get(h.ctx, op.ID); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("Get after a claim decided otherwise: %v, want ErrNotFound: nothing claimed", err)
	}

	// The same decision by another worker's floor is another decision.
	floorOp := newOp("op-other-floor", "T1")
	mine := *allowDecision()
	mine.OperationID = floorOp.ID
	if _, _, err := h.s.RecordDecision(h.ctx, mine); err != nil {
		h.Fatalf("RecordDecision: %v", err)
	}
	theirs := allowDecision()
	theirs.Layer = "worker /etc/capstan/policy.yaml@ba9876543210"
	if res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: floorOp, Owner: "w2/1", Lease: Lease, Decision: theirs}); err != nil ||
		res.Status != ledger.DecidedOtherwise || res.Decision == nil || res.Decision.Layer != mine.Layer {
		h.Fatalf("Claim with the decision of another layer = %+v, %v; want decided otherwise by %s", res, err, mine.Layer)
	}

	known := newOp("op-known", "T1")
	before := h.claim("w1/1", known) // claimed without a decision
	approval := &ledger.Decision{Effect: "require_approval", Rule: "default/approval", Reason: "a person approves"}
	if res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: known, Owner: "w1/1", Lease: Lease, Decision: approval}); err != nil || res.Status != ledger.Claimed || !res.DecisionCreated {
		h.Fatalf("Claim recording the first decision of a known operation = %+v, %v; want claimed, created", res, err)
	}
	now := h.get(known.ID)
	if res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: known, Owner: "w1/1", Lease: Lease, Decision: allowDecision()}); err != nil ||
		res.Status != ledger.DecidedOtherwise || res.Decision == nil || res.Decision.Effect != "require_approval" {
		h.Fatalf("Claim with another decision = %+v, %v; want decided otherwise, require_approval", res, err)
	}
	h.unchanged("a claim decided otherwise", now)
	if now.Fence != before.Fence+1 {
		h.Fatalf("fence %d, want %d", now.Fence, before.Fence+1)
	}
}

// A claim refused for another request hash (ErrConflict) still records
// the decision it carries, as RecordDecision before the claim would have,
// and returns it with the error; a decision on another operation is
// refused before anything is written.
func testClaimDecisionOnConflict(h *h) {
	op := newOp("op-conflict", "T1")
	h.claim("w1/1", op)
	other := op
	other.RequestHash = "another-hash"
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: other, Owner: "w2/1", Lease: Lease, Decision: allowDecision()})
	h.expectErrIs("Claim with another request hash", err, ledger.ErrConflict, op.ID)
	if res.Decision == nil || !res.DecisionCreated || res.Decision.OperationID != op.ID {
		h.Fatalf("Claim refused for conflict = %+v; want the decision it recorded", res)
	}
	if ds, err := h.s.Decisions(h.ctx, "T1"); err != nil || len(ds) != 1 || ds[0].OperationID != op.ID {
		h.Fatalf("Decisions = %+v, %v; want the conflicting claim's", ds, err)
	}
	wrong := allowDecision()
	wrong.OperationID = "op-elsewhere"
	if _, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: newOp("op-new", "T2"), Owner: "w1/1", Lease: Lease, Decision: wrong}); err == nil {
		h.Fatal("Claim with a decision on another operation succeeded")
	}
	if ds, err := h.s.Decisions(h.ctx, "T2"); err != nil || len(ds) != 0 {
		h.Fatalf("Decisions(T2) = %+v, %v; want none", ds, err)
	}
	if _, err := h.s.Get(h.ctx, "op-new"); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("Get(op-new) = %v, want ErrNotFound", err)
	}
}

// 16 claimers race for one new id, each with its own decision: exactly
// one decision is recorded, and only a claimer whose decision it is may
// claim — exactly one does; the others see it in progress (same
// decision) or decided otherwise.
func testConcurrentDecidedClaims(h *h) {
	op := newOp("op-race-decided", "T1")
	const n = 16
	results := make([]ledger.ClaimResult, n)
	err := race(n, func(i int) error {
		d := allowDecision()
		d.Reason = fmt.Sprintf("reason %d", i%2)
		var err error
		results[i], err = h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: raceOwner(i), Lease: Lease, Decision: d})
		return err
	})
	if err != nil {
		h.Fatalf("concurrent claims failed: %v", err)
	}
	ds, err := h.s.Decisions(h.ctx, "T1")
	if err != nil || len(ds) != 1 {
		h.Fatalf("Decisions = %+v, %v; want one", ds, err)
	}
	count := map[ledger.ClaimStatus]int{}
	created := 0
	for i, r := range results {
		count[r.Status]++
		if r.DecisionCreated {
			created++
		}
		mine := fmt.Sprintf("reason %d", i%2) == ds[0].Reason
		if r.Decision == nil || *r.Decision != ds[0] || mine == (r.Status == ledger.DecidedOtherwise) {
			h.Fatalf("claimer %d: %+v (decision %+v); the recorded decision is %+v", i, r, r.Decision, ds[0])
		}
	}
	if created != 1 || count[ledger.Claimed] != 1 || count[ledger.Claimed]+count[ledger.InProgress] != n/2 {
		h.Fatalf("statuses %v, %d created; want 1 created, 1 claimed, %d in progress", count, created, n/2-1)
	}
}
