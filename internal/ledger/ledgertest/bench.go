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

// BenchmarkTask runs, per iteration, the ledger calls of one bench demo
// task (bench/results/latest.md: four model turns, three tool calls, one
// delivery) against one store, one after another: 4 CommitTurn of 4 items
// each and 4 GetTurn, 3 claims straight into running carrying the
// policy's decision, 1 delivery claim and its MarkRunning, 4 Complete
// with an item each, 6 GetItem and 3 GetItems. It reports the
// allocations, and its CPU profile (-cpuprofile) is the ledger's share of
// a task's.
func BenchmarkTask(b *testing.B, newStore func(b *testing.B) ledger.Store) {
	ctx := context.Background()
	s := newStore(b)
	item := func(n, i int) []byte {
		return fmt.Appendf(nil, `{"role":"assistant","content":"turn %d item %d %0400d"}`, n, i, n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		task := fmt.Sprintf("task-%d", n)
		var refs []string
		for turn := range 4 {
			id := fmt.Sprintf("%s/t%d", task, turn)
			if _, err := s.GetTurn(ctx, id); err == nil {
				b.Fatalf("GetTurn(%s) found a turn never committed", id)
			}
			if turn > 0 {
				if _, err := s.GetItem(ctx, refs[len(refs)-1]); err != nil {
					b.Fatal(err)
				}
				if _, err := s.GetItems(ctx, refs); err != nil {
					b.Fatal(err)
				}
			}
			items := [][]byte{item(n, 4*turn), item(n, 4*turn+1), item(n, 4*turn+2), item(n, 4*turn+3)}
			for _, it := range items {
				refs = append(refs, ledger.ItemRef(it))
			}
			if _, err := s.CommitTurn(ctx, id, item(n, -turn), items...); err != nil {
				b.Fatal(err)
			}
			if turn == 3 {
				break
			}
			op := newOp(fmt.Sprintf("%s:op-%d", task, turn), task)
			if _, err := s.GetItem(ctx, refs[0]); err != nil {
				b.Fatal(err)
			}
			res, err := s.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: "bench/1", Lease: time.Minute, Running: true, Decision: allowDecision()})
			if err != nil || res.Status != ledger.Claimed {
				b.Fatalf("Claim(%q) = %q, %v", op.ID, res.Status, err)
			}
			msg := fmt.Appendf(nil, `{"role":"tool","content":"done %s"}`, op.ID)
			if err := s.Complete(ctx, ledger.Completion{ID: op.ID, Fence: res.Op.Fence, State: "succeeded", ExternalID: "x", Result: msg, Items: [][]byte{msg}}); err != nil {
				b.Fatal(err)
			}
			refs = append(refs, ledger.ItemRef(msg))
		}
		op := newOp(task+":deliver", task)
		res, err := s.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: "bench/1", Lease: time.Minute})
		if err != nil || res.Status != ledger.Claimed {
			b.Fatalf("Claim(%q) = %q, %v", op.ID, res.Status, err)
		}
		if err := s.MarkRunning(ctx, op.ID, res.Op.Fence, nil); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, ledger.Completion{ID: op.ID, Fence: res.Op.Fence, State: "succeeded", ExternalID: "ts"}); err != nil {
			b.Fatal(err)
		}
	}
}
