package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/config"
)

// This file holds how a task waits for a dependency's circuit breaker
// (docs/design.md §7): an attempt, operation or delivery the breaker kept
// from being sent cost nothing, so the task waits the time left — a
// durable timer, journalled, in the current details and in `starter
// status` — and then tries again, spending no retry budget.

// waitsOnBreakers reports whether this task waits out open breakers
// itself (changeWorkflowWaitsOutBreakers). Tasks started before it let
// Temporal retry a BreakerOpen error within the activity's attempts and
// read a breaker_open attempt as an outcome the guard has no row for.
func (t *task) waitsOnBreakers(ctx workflow.Context) bool {
	return t.inEffect(ctx, changeWorkflowWaitsOutBreakers)
}

// waitForBreaker waits d for breaker key, which kept what from being sent.
// The wait is a line in the journal (in a persistent task, one every 30 s
// of it: sleep), the workflow's current details (the Temporal UI shows
// them) and the task's status, until it is over. Other tasks sleep it in
// one timer: an open period is 30 s plus at most 5 s of jitter, and the
// v5 histories recorded it so.
//
// A wait for the ledger (ledgerBreaker) counts, since
// changeLedgerOutageWaits, against limit — the worker's
// CAPSTAN_LEDGER_OUTAGE_LIMIT, the default when it sent none — from the
// first wait of the outage: one that would end past it fails the task
// ledger_unavailable instead.
func (t *task) waitForBreaker(ctx workflow.Context, key string, d, limit time.Duration, what string) error {
	if key == ledgerBreaker {
		if err := t.ledgerOutage(ctx, d, limit, what); err != nil {
			return err
		}
	}
	until := workflow.Now(ctx).Add(d)
	t.note(ctx, "waiting %s for breaker %s: %s was not sent (no retry budget spent)", roundWait(d), key, what)
	t.result.Waiting = fmt.Sprintf("waiting %s for breaker %s (until %s)", roundWait(d), key, until.UTC().Format("15:04:05 MST"))
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Waiting %s for breaker `%s`** (until %s): %s was not sent; it is tried again when the breaker lets a call through.",
		roundWait(d), key, until.UTC().Format(time.RFC3339), what))
	var err error
	if t.in.Persistent {
		err = t.sleep(ctx, d, "breaker "+key)
	} else {
		err = workflow.Sleep(ctx, d)
	}
	t.result.Waiting = ""
	workflow.SetCurrentDetails(ctx, "")
	return err
}

// ledgerBreaker is the key of the ledger's breaker (breaker.Ledger).
const ledgerBreaker = "ledger"

// ledgerOutage starts the count of an outage of the ledger at its first
// wait and fails the task once waiting d more would pass limit. Tasks
// started before changeLedgerOutageWaits wait without a limit.
func (t *task) ledgerOutage(ctx workflow.Context, d, limit time.Duration, what string) error {
	if !t.since(ctx, changeLedgerOutageWaits) {
		return nil
	}
	if limit <= 0 {
		limit = config.DefaultLedgerOutageLimit
	}
	now := workflow.Now(ctx)
	if t.ledgerDownSince.IsZero() {
		t.ledgerDownSince = now
	}
	if waited := now.Sub(t.ledgerDownSince); waited+d > limit {
		t.note(ctx, "the ledger has been unavailable for %s; %s was not sent; giving up (the limit is %s)", roundWait(waited), what, limit)
		return fail(FailLedgerUnavailable, "the ledger could not be reached for %s, longer than the %s a task waits for it (CAPSTAN_LEDGER_OUTAGE_LIMIT); %s was not sent",
			roundWait(waited+d), limit, what)
	}
	return nil
}

// ledgerBack ends the count of a ledger outage: an activity that needs the
// ledger completed.
func (t *task) ledgerBack() { t.ledgerDownSince = time.Time{} }

// reconcileWaits reports whether a reconciliation the ledger's breaker
// kept from running is waited out (changeLedgerOutageWaits), rather than
// retried by Temporal within the activity's attempts and then read as
// indeterminate.
func (t *task) reconcileWaits(ctx workflow.Context) bool {
	return t.since(ctx, changeLedgerOutageWaits)
}

// stoppedWaiting says why a wait for breaker key ended without a call:
// the task was cancelled, or the ledger stayed down too long.
func stoppedWaiting(ctx workflow.Context, key string) string {
	if ctx.Err() != nil {
		return "cancelled while waiting for breaker " + key
	}
	return "breaker " + key + " stayed open too long"
}

// roundWait shows a wait to the second, or to the hundredth under one.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}
