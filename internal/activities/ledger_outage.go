package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
)

// This file holds how the activities live through a ledger they cannot
// reach (docs/design.md §5.4, §7): the ledger is a dependency like GitHub
// or a model provider, with a breaker of its own (breaker.Ledger) that
// every ledger call of this worker goes through and feeds. A call the
// ledger could not answer (ledger.ErrUnavailable) counts against it; any
// answer, a refusal included (ErrConflict, ErrFenced, ErrNotFound…), shows
// the ledger is up. While the breaker is open, no ledger call is made.
//
// An activity whose ledger call failed that way before anything was sent
// ends with the BreakerOpen error of breaker "ledger" (ledgerDown): nothing
// was sent, the workflow waits the breaker out, journalled, spending no
// retry budget, for up to the worker's CAPSTAN_LEDGER_OUTAGE_LIMIT. The
// ledger write that records what a sent call did is instead retried within
// the activity (record), so a short outage costs no reconciliation.

// guardedLedger is the activities' ledger behind the ledger's breaker.
type guardedLedger struct {
	Ledger
	breakers *breaker.Set
}

// call runs f through the ledger's breaker. While the breaker is open, f
// is not run and the error is an *unavailableLedger (ledger.ErrUnavailable
// with the breaker's wait). A refusal while a trial or probe call is in
// flight is waited out here, briefly: that call's answer decides.
func (l *guardedLedger) call(ctx context.Context, f func() error) error {
	for {
		permit, err := l.breakers.Allow(breaker.Ledger)
		var open *breaker.OpenError
		switch {
		case err == nil:
			err = f()
			permit.Done(ledgerHealth(err))
			return err
		case !errors.As(err, &open):
			return err
		case open.State == breaker.StateOpen:
			return &unavailableLedger{open: open}
		}
		t := time.NewTimer(max(open.Wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ledger.Unavailable(fmt.Errorf("%w (%v)", ctx.Err(), open))
		case <-t.C:
		}
	}
}

// ledgerHealth judges a ledger call's ending for the ledger's breaker.
func ledgerHealth(err error) breaker.Outcome {
	switch {
	case err == nil:
		return breaker.Success
	case errors.Is(err, ledger.ErrUnavailable):
		return breaker.Failure
	case errors.Is(err, context.Canceled):
		return breaker.Ignored
	}
	return breaker.Success // the ledger answered, if with a refusal
}

// unavailableLedger is a ledger call the open breaker kept from being made.
type unavailableLedger struct{ open *breaker.OpenError }

func (e *unavailableLedger) Error() string   { return "the ledger is unavailable: " + e.open.Error() }
func (e *unavailableLedger) Unwrap() []error { return []error{ledger.ErrUnavailable, e.open} }

func (l *guardedLedger) Claim(ctx context.Context, req ledger.ClaimRequest) (res ledger.ClaimResult, err error) {
	err = l.call(ctx, func() error { res, err = l.Ledger.Claim(ctx, req); return err })
	return res, err
}

func (l *guardedLedger) MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error {
	return l.call(ctx, func() error { return l.Ledger.MarkRunning(ctx, id, fence, facts) })
}

func (l *guardedLedger) Renew(ctx context.Context, id string, fence int64, lease time.Duration) error {
	return l.call(ctx, func() error { return l.Ledger.Renew(ctx, id, fence, lease) })
}

func (l *guardedLedger) Complete(ctx context.Context, c ledger.Completion) error {
	return l.call(ctx, func() error { return l.Ledger.Complete(ctx, c) })
}

func (l *guardedLedger) Release(ctx context.Context, id string, fence int64) error {
	return l.call(ctx, func() error { return l.Ledger.Release(ctx, id, fence) })
}

func (l *guardedLedger) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (op ledger.Operation, err error) {
	err = l.call(ctx, func() error { op, err = l.Ledger.TakeForReconcile(ctx, id, owner, lease); return err })
	return op, err
}

func (l *guardedLedger) Get(ctx context.Context, id string) (op ledger.Operation, err error) {
	err = l.call(ctx, func() error { op, err = l.Ledger.Get(ctx, id); return err })
	return op, err
}

func (l *guardedLedger) ListByTask(ctx context.Context, taskID string) (ops []ledger.Operation, err error) {
	err = l.call(ctx, func() error { ops, err = l.Ledger.ListByTask(ctx, taskID); return err })
	return ops, err
}

func (l *guardedLedger) PutItem(ctx context.Context, data []byte) (ref string, err error) {
	err = l.call(ctx, func() error { ref, err = l.Ledger.PutItem(ctx, data); return err })
	return ref, err
}

func (l *guardedLedger) GetItem(ctx context.Context, ref string) (data []byte, err error) {
	err = l.call(ctx, func() error { data, err = l.Ledger.GetItem(ctx, ref); return err })
	return data, err
}

func (l *guardedLedger) GetItems(ctx context.Context, refs []string) (data [][]byte, err error) {
	err = l.call(ctx, func() error { data, err = l.Ledger.GetItems(ctx, refs); return err })
	return data, err
}

func (l *guardedLedger) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) (stored []byte, err error) {
	err = l.call(ctx, func() error { stored, err = l.Ledger.CommitTurn(ctx, turnID, output, items...); return err })
	return stored, err
}

func (l *guardedLedger) GetTurn(ctx context.Context, turnID string) (out []byte, err error) {
	err = l.call(ctx, func() error { out, err = l.Ledger.GetTurn(ctx, turnID); return err })
	return out, err
}

func (l *guardedLedger) RecordDecision(ctx context.Context, d ledger.Decision) (stored ledger.Decision, created bool, err error) {
	err = l.call(ctx, func() error { stored, created, err = l.Ledger.RecordDecision(ctx, d); return err })
	return stored, created, err
}

// ledgerWait is how long the workflow should wait before trying again an
// activity the unavailable ledger stopped (err wraps
// ledger.ErrUnavailable): the time left in the breaker's open period when
// it is open, else the activity's jittered backoff — the breaker has not
// opened yet, and the next failures will open it.
func (a *Activities) ledgerWait(ctx context.Context, err error) contract.BreakerWait {
	w := contract.BreakerWait{Breaker: string(breaker.Ledger), State: string(breaker.StateClosed),
		Wait: a.backoff(ctx), OutageLimit: a.ledgerOutageLimit()}
	var open *breaker.OpenError
	if errors.As(err, &open) {
		w.State, w.Wait = string(open.State), backoff.AfterWait.Delay(1, open.Wait, a.Random())
	}
	return w
}

func (a *Activities) ledgerOutageLimit() time.Duration {
	if a.LedgerOutageLimit > 0 {
		return a.LedgerOutageLimit
	}
	return config.DefaultLedgerOutageLimit
}

// ledgerDown is the BreakerOpen error of breaker "ledger" for an activity
// that sent nothing because the ledger could not be reached (err): the
// workflow waits and starts it again, as for any open breaker.
func (a *Activities) ledgerDown(ctx context.Context, err error) error {
	w := a.ledgerWait(ctx, err)
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("the ledger could not be reached, so nothing was sent: %v; trying again in %s", err, w.Wait.Round(time.Millisecond)),
		contract.ErrTypeBreakerOpen, temporal.ApplicationErrorOptions{NextRetryDelay: w.Wait, Details: []any{w}})
}

// ledgerAttemptFailure is the breaker_open ending of a model attempt that
// could not read or commit its turn because the ledger could not be
// reached: the turn guard waits it out like any open breaker.
func (a *Activities) ledgerAttemptFailure(ctx context.Context, r contract.AttemptReport, err error) error {
	w := a.ledgerWait(ctx, err)
	r.Breaker, r.OutageLimitMS = w.Breaker, w.OutageLimit.Milliseconds()
	return attemptFailure(ctx, r, &model.AttemptError{Outcome: model.OutcomeBreakerOpen, Phase: r.Phase,
		RetryAfter: w.Wait, Message: "the ledger could not be reached: " + err.Error(), Err: err})
}

// recordMargin is what record leaves of the activity's time when it gives
// up waiting for the ledger, for the last write and the answer.
const recordMargin = recordTimeout + 5*time.Second

// record writes c, what a call that was sent did, under a context the
// activity's cancellation cannot break. While the ledger cannot be
// reached it tries again — heartbeating, at the breaker's pace — until
// the activity's time is nearly out: what the call did is known here and
// nowhere else. If the ledger is still down then, the operation is left
// as the ledger holds it (running) and the error is the OperationUnknown
// one: a reconciler finds out what the call did once the ledger is back.
// Any other failure is returned as it is.
func (a *Activities) record(ctx context.Context, c ledger.Completion) error {
	var deadline time.Time
	if activity.IsActivity(ctx) {
		deadline = activity.GetInfo(ctx).Deadline.Add(-recordMargin)
	}
	for n := 1; ; n++ {
		rctx, cancel := recordContext(ctx)
		err := a.Ledger.Complete(rctx, c)
		cancel()
		if !errors.Is(err, ledger.ErrUnavailable) {
			return err
		}
		if deadline.IsZero() { // not an activity: nobody to heartbeat for, no deadline to wait within
			return unrecorded(c, err)
		}
		wait := min(a.ledgerWait(ctx, err).Wait, a.heartbeatInterval(ctx), backoff.Policy{Base: 100 * time.Millisecond, Cap: 5 * time.Second}.Span(n))
		if a.Now().Add(wait).After(deadline) {
			return unrecorded(c, err)
		}
		a.Logger.WarnContext(ctx, "ledger unavailable: waiting to record what a call did",
			"operation_id", c.ID, "state", string(c.State), "wait", wait, "error", err)
		activity.RecordHeartbeat(ctx, OperationHeartbeat{OperationID: c.ID, Step: stepRecording})
		<-time.After(wait) // not the activity's cancellation: the write must be made
	}
}

// unrecorded is the OperationUnknown error of a call whose outcome c the
// unavailable ledger (err) would not take.
func unrecorded(c ledger.Completion, err error) error {
	return unknownOperation(c.ID, capstan.OutcomeUnknown,
		fmt.Errorf("what the call did (%s) could not be recorded, the ledger being unavailable: %w", c.State, err))
}

// recordFailed is the error of a failed record: the OperationUnknown error
// it returns when the ledger stayed down, as it is (an application error
// must reach Temporal unwrapped), any other with what failed.
func recordFailed(err error, format string, args ...any) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
