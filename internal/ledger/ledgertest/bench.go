package ledgertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// BenchmarkDecidedClaim compares the two ways a tool call the policy lets
// through reaches the ledger, one claim of a new operation per iteration,
// claimed straight into running as ExecuteTool claims it:
//
//   - "record-then-claim": RecordDecision, then Claim — two write
//     transactions, as before ClaimRequest.Decision;
//   - "claim-with-decision": one Claim that carries the decision.
//
// newStore returns a fresh, empty store on the real clock and arranges for
// it to be closed when b ends.
func BenchmarkDecidedClaim(b *testing.B, newStore func(b *testing.B) ledger.Store) {
	for _, v := range []struct {
		name  string
		claim func(ctx context.Context, s ledger.Store, req ledger.ClaimRequest) (ledger.ClaimResult, error)
	}{
		{"record-then-claim", func(ctx context.Context, s ledger.Store, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
			d, _ := ledger.ClaimDecision(req)
			if _, _, err := s.RecordDecision(ctx, d); err != nil {
				return ledger.ClaimResult{}, err
			}
			req.Decision = nil
			return s.Claim(ctx, req)
		}},
		{"claim-with-decision", func(ctx context.Context, s ledger.Store, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
			return s.Claim(ctx, req)
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b)
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				op := newOp(fmt.Sprintf("op-bench-%d", n), "task-bench")
				res, err := v.claim(ctx, s, ledger.ClaimRequest{Op: op, Owner: "bench/1", Lease: time.Minute, Running: true, Decision: allowDecision()})
				if err != nil {
					b.Fatal(err)
				}
				if res.Status != ledger.Claimed {
					b.Fatalf("Claim(%q): status %q, want claimed", op.ID, res.Status)
				}
			}
		})
	}
}
