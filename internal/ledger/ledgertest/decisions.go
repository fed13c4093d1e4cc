package ledgertest

import (
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// A policy decision is recorded once per operation id: the first record
// wins, stamped by the ledger's clock, and a later one (a repeated
// ExecuteTool, whose decision may differ) gets the first back, not
// created. A task's decisions list oldest first; a task without any lists
// an empty slice.
func testDecisionRecordedOnce(h *h) {
	first := ledger.Decision{OperationID: "acme:T1:~s:put:1", Tenant: "acme", TaskID: "T1", Tool: "github_put_file",
		Effect: "deny", Rule: "default/base-branch", Reason: "main is this task's base branch", Refused: true}
	got, created, err := h.s.RecordDecision(h.ctx, first)
	want := first
	want.CreatedAt = Epoch
	if err != nil || !created || got != want {
		h.Fatalf("RecordDecision = %+v, %v, %v; want %+v, created", got, created, err, want)
	}
	h.clock.Advance(time.Second)
	other := first
	other.Effect, other.Rule, other.Reason, other.Refused = "allow", "default/allow", "allowed", false
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
