package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// race runs fn(0), …, fn(n-1) on n goroutines released together, so that
// their calls overlap as much as the scheduler allows, and returns their
// errors joined. It is the one concurrency harness of the suite, its
// benchmark included.
func race(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

func raceOwner(i int) string { return fmt.Sprintf("worker-%02d/1", i) }

// 16 claimers race for one new id: exactly one gets it, the rest see it in
// progress, and the row is at fence 1 under the winner. Run with -race.
func testConcurrentClaims(h *h) {
	oneWinner(h, newOp("op-race", "task-1"), 1)
}

// After the lease of an unsent claim expired, 16 claimers race to take it
// over: exactly one does, with the next fence.
func testConcurrentReclaims(h *h) {
	op := newOp("op-race-again", "task-1")
	first := h.claim("worker-zz/1", op)
	h.clock.Advance(Lease)
	oneWinner(h, op, first.Fence+1)
}

// oneWinner races 16 claimers for op and wants exactly one Claimed, the
// others InProgress, and the row CLAIMED by the winner at wantFence.
func oneWinner(h *h, op ledger.Operation, wantFence int64) {
	h.Helper()
	const n = 16
	statuses := make([]ledger.ClaimStatus, n)
	err := race(n, func(i int) error {
		res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: raceOwner(i), Lease: Lease})
		statuses[i] = res.Status
		return err
	})
	if err != nil {
		h.Fatalf("concurrent claims failed: %v", err)
	}
	count := map[ledger.ClaimStatus]int{}
	var winner string
	for i, st := range statuses {
		count[st]++
		if st == ledger.Claimed {
			winner = raceOwner(i)
		}
	}
	if count[ledger.Claimed] != 1 || count[ledger.InProgress] != n-1 {
		h.Fatalf("statuses %v, want 1 claimed and %d in progress", count, n-1)
	}
	got := h.get(op.ID)
	if got.Fence != wantFence || got.LeaseOwner != winner || got.State != capstan.OutcomeClaimed {
		h.Fatalf("after the race: fence %d owner %q state %s, want fence %d owner %q CLAIMED",
			got.Fence, got.LeaseOwner, got.State, wantFence, winner)
	}
}

// Many claimers over many ids, each winner running its operation to the end.
func testConcurrentClaimsMany(h *h) {
	claimAndRunRace(h, []ledger.Store{h.s}, "task-many", 8, 16)
}

// claimAndRunRace has claimers goroutines, spread over stores, each claim
// every one of ids operations of task, starting at a different id so that
// they collide everywhere; every winner runs its operation to SUCCEEDED.
// Every operation must be won exactly once, run once and stay at fence 1,
// and every losing claim must see it in progress or already succeeded.
func claimAndRunRace(h *h, stores []ledger.Store, task string, ids, claimers int) {
	h.Helper()
	var (
		mu   sync.Mutex
		wins = map[string]int{}
	)
	err := race(claimers, func(i int) error {
		s, owner := stores[i%len(stores)], raceOwner(i)
		for k := range ids {
			op := newOp(fmt.Sprintf("op-many-%d", (i+k)%ids), task)
			res, err := s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: owner, Lease: Lease})
			if err != nil {
				return err
			}
			switch res.Status {
			case ledger.Claimed:
			case ledger.InProgress, ledger.AlreadySucceeded:
				continue
			default:
				return fmt.Errorf("Claim(%q) by %q: status %q, want claimed, in progress or already succeeded", op.ID, owner, res.Status)
			}
			mu.Lock()
			wins[op.ID]++
			mu.Unlock()
			if err := s.MarkRunning(h.ctx, op.ID, res.Op.Fence, nil); err != nil {
				return err
			}
			err = s.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: res.Op.Fence,
				State: capstan.OutcomeSucceeded, ExternalID: owner})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		h.Fatalf("concurrent operations failed: %v", err)
	}
	ops, err := stores[0].ListByTask(h.ctx, task)
	if err != nil || len(ops) != ids {
		h.Fatalf("ListByTask: %d operations, %v; want %d", len(ops), err, ids)
	}
	for _, op := range ops {
		if wins[op.ID] != 1 || op.State != capstan.OutcomeSucceeded || op.AttemptCount != 1 || op.Fence != 1 {
			h.Errorf("%s: won %d times, state %s, attempts %d, fence %d; want once, SUCCEEDED, 1, 1",
				op.ID, wins[op.ID], op.State, op.AttemptCount, op.Fence)
		}
	}
}

// BenchmarkClaim measures how many claims of new operations a store takes
// per second, with 1 and with 8 concurrent claimers (BenchmarkClaimers).
// newStore returns a fresh, empty store on the real clock and arranges for
// it to be closed when b ends.
func BenchmarkClaim(b *testing.B, newStore func(b *testing.B) ledger.Store) {
	for _, claimers := range []int{1, 8} {
		b.Run(fmt.Sprintf("claimers=%d", claimers), func(b *testing.B) {
			BenchmarkClaimers(b, claimers, newStore)
		})
	}
}

// BenchmarkClaimers measures claims of new operations with the given number
// of concurrent claimers; each claim is of a distinct operation, so every one
// inserts a row. It reports the rate as the "claims/s" metric. It is
// BenchmarkClaim for one number of claimers, for a program that runs it
// through testing.Benchmark (make bench).
func BenchmarkClaimers(b *testing.B, claimers int, newStore func(b *testing.B) ledger.Store) {
	ctx := context.Background()
	s := newStore(b)
	var next atomic.Int64
	b.ResetTimer()
	err := race(claimers, func(i int) error {
		owner := raceOwner(i)
		for {
			n := next.Add(1)
			if n > int64(b.N) {
				return nil
			}
			op := newOp(fmt.Sprintf("op-bench-%d", n), "task-bench")
			res, err := s.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: owner, Lease: time.Minute})
			if err != nil {
				return err
			}
			if res.Status != ledger.Claimed {
				return fmt.Errorf("Claim(%q): status %q, want claimed", op.ID, res.Status)
			}
		}
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// 32 writes at once, every other one refused for its stale fence: each
// refused write changes nothing and each accepted one is stored, whichever
// writes a store runs together (SQLite commits concurrent writes in one
// transaction). Run with -race.
func testConcurrentWritesFailAlone(h *h) {
	const n = 32
	ops := make([]ledger.Operation, n)
	for i := range ops {
		ops[i] = h.claimRunning(raceOwner(i), newOp(fmt.Sprintf("op-mixed-%02d", i), "task-mixed"))
	}
	err := race(n, func(i int) error {
		fence := ops[i].Fence
		if i%2 == 1 {
			fence++ // a fence this operation never had
		}
		err := h.s.Complete(h.ctx, ledger.Completion{ID: ops[i].ID, Fence: fence, State: capstan.OutcomeSucceeded,
			ExternalID: fmt.Sprintf("e-%02d", i), Items: [][]byte{fmt.Appendf(nil, "item %02d", i)}})
		switch {
		case i%2 == 0 && err != nil:
			return fmt.Errorf("store.Complete of %s under its fence: %w", ops[i].ID, err)
		case i%2 == 1 && !errors.Is(err, ledger.ErrFenced):
			return fmt.Errorf("store.Complete of %s under a stale fence: %v, want ErrFenced", ops[i].ID, err)
		}
		return nil
	})
	if err != nil {
		h.Fatal(err)
	}
	for i, op := range ops {
		got := h.get(op.ID)
		_, itemErr := h.s.GetItem(h.ctx, ledger.ItemRef(fmt.Appendf(nil, "item %02d", i)))
		if i%2 == 0 {
			if got.State != capstan.OutcomeSucceeded || got.ExternalID != fmt.Sprintf("e-%02d", i) || itemErr != nil {
				h.Errorf("%s after its accepted Complete: %s %q, item %v; want SUCCEEDED and its item stored", op.ID, got.State, got.ExternalID, itemErr)
			}
			continue
		}
		if d := diff(got, op); d != "" || !errors.Is(itemErr, ledger.ErrNotFound) {
			h.Errorf("%s after its refused Complete: %s, item %v; want it unchanged and no item", op.ID, d, itemErr)
		}
	}
}
