package activities

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
)

// maxHeld bounds how many claims countingLedger tracks. A claim is dropped
// when its attempt completes or releases it; one that is neither (an
// attempt that failed between claim and call) stays until the bound evicts
// it, at worst losing the count of one operation.
const maxHeld = 4096

// countingLedger counts every state an operation reaches in the ledger
// (Metrics.OperationSettled), whichever activity writes it: a tool call, a
// delivery, a released claim, a reconciler's verdict. It remembers the kind
// and the state of each operation this worker holds under a fence, from the
// claim (or the take for reconciliation) to the write that ends the hold,
// and counts that write when it succeeds and changes the state; a hand-back
// that leaves an operation UNKNOWN is not counted again. It also logs each
// change, with the ids of the activity's context.
type countingLedger struct {
	Ledger
	metrics Metrics
	logger  *slog.Logger

	mu   sync.Mutex
	held map[heldKey]heldOp
}

type heldKey struct {
	id    string
	fence int64
}

type heldOp struct {
	kind  string
	state capstan.Outcome
}

func (l *countingLedger) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	res, err := l.Ledger.Claim(ctx, req)
	if err == nil && res.Status == ledger.Claimed {
		l.hold(res.Op.ID, res.Op.Fence, req.Op.Kind, res.Op.State)
	}
	return res, err
}

func (l *countingLedger) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (ledger.Operation, error) {
	op, err := l.Ledger.TakeForReconcile(ctx, id, owner, lease)
	if err == nil {
		l.hold(op.ID, op.Fence, op.Kind, op.State)
	}
	return op, err
}

func (l *countingLedger) Complete(ctx context.Context, c ledger.Completion) error {
	err := l.Ledger.Complete(ctx, c)
	l.settled(ctx, c.ID, c.Fence, c.State, err)
	return err
}

func (l *countingLedger) Release(ctx context.Context, id string, fence int64) error {
	err := l.Ledger.Release(ctx, id, fence)
	l.settled(ctx, id, fence, capstan.OutcomeAbsent, err)
	return err
}

func (l *countingLedger) hold(id string, fence int64, kind string, state capstan.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[heldKey]heldOp{}
	}
	if len(l.held) >= maxHeld {
		for k := range l.held {
			delete(l.held, k)
			break
		}
	}
	l.held[heldKey{id, fence}] = heldOp{kind: kind, state: state}
}

func (l *countingLedger) take(id string, fence int64) heldOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := heldKey{id, fence}
	h := l.held[k]
	delete(l.held, k)
	return h
}

// settled ends the hold of id under fence; when the write succeeded and
// changed the state, it is counted and logged.
func (l *countingLedger) settled(ctx context.Context, id string, fence int64, state capstan.Outcome, err error) {
	h := l.take(id, fence)
	if err != nil || h.kind == "" || h.state == state {
		return
	}
	l.metrics.OperationSettled(h.kind, state)
	l.logger.InfoContext(logids.With(ctx, logids.IDs{OperationID: id}), "operation settled",
		"kind", h.kind, "state", string(state), "from", string(h.state))
}
