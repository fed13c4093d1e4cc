package workerapp

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/capstanhq/capstan/internal/ledgergc"
)

// startLedgerGC runs runLedgerGC until ctx ends or the returned stop is
// called; stop returns once a pass under way has ended, so the ledger can
// be closed after it.
func (w *Worker) startLedgerGC(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.runLedgerGC(ctx)
	}()
	return func() { cancel(); <-done }
}

// runLedgerGC runs the ledger's retention every w.gc.Every until ctx ends
// (CAPSTAN_LEDGER_GC_EVERY; nothing when it is zero). Every worker of a
// pool may run it: a pass deletes only chains Temporal no longer has, and
// two passes at once delete each chain once (the second finds nothing). A
// pass that cannot prove it asks the Temporal the ledger serves
// (ledgergc.RefusedError) deletes nothing and says why in its warning.
// The first pass waits a jittered part of the period, so a pool started
// together does not pass together.
func (w *Worker) runLedgerGC(ctx context.Context) {
	every := w.gc.Every
	if every <= 0 {
		return
	}
	next := time.NewTimer(every/2 + rand.N(every/2+1))
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		}
		rep, err := ledgergc.Run(ctx, w.ledger, w.client.WorkflowService(),
			ledgergc.Options{Namespace: w.namespace, OlderThan: w.gc.OlderThan, Logger: w.logger})
		if err != nil && ctx.Err() == nil {
			w.logger.Warn("ledger gc pass failed", "error", err)
		} else if err == nil {
			r := rep.Removed
			w.logger.Info("ledger gc pass", "tasks", r.Tasks, "operations", r.Operations, "decisions", r.Decisions, "turns", r.Turns, "items", r.Items,
				"bytes", r.Bytes, "kept", rep.Kept, "unchecked", rep.Unchecked)
		}
		next.Reset(every)
	}
}
