package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/tool"
)

// This file holds what ExecuteTool and Deliver share: both perform an
// operation under a claim in the ledger (docs/design.md §5.3, §5.4).

// begin takes an operation for this attempt (docs/design.md §5.4 steps 1 to
// 3): it claims it, asks the breaker key for leave to send, and marks it
// RUNNING — in one ledger write (claimRunning) when the breaker gave leave
// first and there is nothing to prepare, or when the ledger has never seen
// the operation and its facts are read before the claim (prepareFirst).
// When the ledger already holds it
// as SUCCEEDED, begin returns that record and done: nothing may be sent
// again. When the breaker is open, begin releases the claim — nothing left
// the worker, so the operation is ABSENT and the next attempt claims it
// afresh — and returns a contract.ErrTypeBreakerOpen error. Otherwise the caller
// holds the claim under rec.Fence, the operation is RUNNING (rec is the row
// as it now stands, this attempt counted), and the caller must report the
// call's ending to permit: from here on, a failure after the request may
// have left must be recorded UNKNOWN. Every other ending is returned as the
// application error the workflow expects.
//
// prepare, when not nil, runs after the breaker's leave and before the
// RUNNING mark, under heartbeats: what it returns is recorded with the
// operation as its facts (tool.Preparer), so they are in the ledger before
// anything is sent. For an operation the ledger has never seen it runs
// before the claim, which records its facts (prepareFirst); for any other
// it runs under the claim, whose lease the heartbeats renew, and the
// RUNNING mark records them. When it fails nothing has been sent: the
// breaker is told what the failure showed, a claim taken is released
// (ABSENT), and the error is the retryable
// contract.ErrTypeOperationNotSent, after the wait a rate limit asked for.
//
// decision, when not nil, is the policy's decision on the operation, which
// the claim records in its own write (ledger.ClaimRequest.Decision). When
// the ledger holds another decision on it, nothing is claimed and the
// error is a *decidedOtherwise carrying that one.
func (a *Activities) begin(ctx context.Context, op ledger.Operation, decision *ledger.Decision, key breaker.Key, prepare func(context.Context) ([]byte, error)) (rec ledger.Operation, permit *breaker.Permit, done bool, err error) {
	if prepare == nil || a.unseen(ctx, op.ID) {
		if permit, err := a.Breakers.Allow(key); err == nil {
			if prepare == nil {
				return a.claimRunning(ctx, op, decision, permit, nil)
			}
			return a.prepareFirst(ctx, op, decision, permit, prepare)
		}
		// The breaker refused: claim first as below, so an operation that
		// already succeeded is still answered from the ledger, and the
		// breaker, asked again, says why nothing is sent.
	}
	claim, err := a.claim(ctx, ledger.ClaimRequest{Op: op, Owner: a.owner(ctx), Lease: a.lease(ctx), Decision: decision})
	if err != nil || claim.Status != ledger.Claimed {
		rec, done, err := a.notClaimed(op, claim, err)
		return rec, nil, done, err
	}
	// The breaker is asked with the claim held and before RUNNING: a
	// refusal then provably sent nothing, and the claim goes back.
	permit, err = a.Breakers.Allow(key)
	if err != nil {
		rctx, cancel := recordContext(ctx)
		defer cancel()
		if rerr := a.Ledger.Release(rctx, op.ID, claim.Op.Fence); rerr != nil {
			return rec, nil, false, fmt.Errorf("release operation %s, which breaker %s kept from being sent: %w", op.ID, key, rerr)
		}
		var open *breaker.OpenError
		if errors.As(err, &open) {
			return rec, nil, false, a.breakerOpen(fmt.Sprintf("operation %s (%s)", op.ID, op.Kind), open)
		}
		return rec, nil, false, err
	}
	var facts []byte
	if prepare != nil {
		if facts, err = a.readFacts(ctx, op.ID, permit, prepare, a.renewLease(ctx, op.ID, claim.Op.Fence)); err != nil {
			return rec, nil, false, a.notPrepared(ctx, op, claim.Op.Fence, err)
		}
	}
	if err := a.Ledger.MarkRunning(ctx, op.ID, claim.Op.Fence, facts); err != nil {
		permit.Done(breaker.Ignored) // nothing was sent
		return rec, nil, false, fmt.Errorf("mark operation %s running: %w", op.ID, err)
	}
	claim.Op.State, claim.Op.Facts = capstan.OutcomeRunning, facts
	claim.Op.AttemptCount++
	return claim.Op, permit, false, nil
}

// claimRunning is begin once the breaker has given leave and nothing is
// left to read before sending: one ledger write claims the operation
// straight into RUNNING with facts (ledger.ClaimRequest.Running) instead of
// a claim and then a RUNNING mark. The claim is durable before anything is
// sent, as with two writes; what is lost is only the moment in between,
// when a crash would have left a CLAIMED row free to take over rather than
// a RUNNING one to reconcile — and a reconciler finds such an operation
// not sent. When the claim is not granted, the permit is handed back
// unused.
func (a *Activities) claimRunning(ctx context.Context, op ledger.Operation, decision *ledger.Decision, permit *breaker.Permit, facts []byte) (rec ledger.Operation, _ *breaker.Permit, done bool, err error) {
	claim, err := a.claim(ctx, ledger.ClaimRequest{Op: op, Owner: a.owner(ctx), Lease: a.lease(ctx), Running: true, Facts: facts, Decision: decision})
	if err != nil || claim.Status != ledger.Claimed {
		permit.Done(breaker.Ignored) // nothing was sent
		rec, done, err := a.notClaimed(op, claim, err)
		return rec, nil, done, err
	}
	return claim.Op, permit, false, nil
}

// unseen reports whether the ledger holds no record of operation id: the
// first attempt at it, with no earlier claim to answer from or reconcile.
// Any error reading says no, and begin claims first, as it always may.
func (a *Activities) unseen(ctx context.Context, id string) bool {
	_, err := a.Ledger.Get(ctx, id)
	return errors.Is(err, ledger.ErrNotFound)
}

// prepareFirst is begin for an operation the ledger has never seen, whose
// tool prepares: it reads the facts (under heartbeats) before claiming,
// then claims straight into RUNNING with them (claimRunning), one durable
// write before sending instead of a claim and a RUNNING mark. Reading
// before the claim is as sound as after it: a claim is granted only where
// nothing of the operation is in flight (new, released or definitely
// failed), and the read is as close to the request as before, one write
// ahead of it. Two attempts that both find it unseen both read; the
// ledger grants one of them. When the read fails nothing was claimed or
// sent, and the error is the retryable contract.ErrTypeOperationNotSent.
func (a *Activities) prepareFirst(ctx context.Context, op ledger.Operation, decision *ledger.Decision, permit *breaker.Permit, prepare func(context.Context) ([]byte, error)) (ledger.Operation, *breaker.Permit, bool, error) {
	facts, err := a.readFacts(ctx, op.ID, permit, prepare, nil)
	if err != nil {
		return ledger.Operation{}, nil, false, a.notSent(ctx, contract.ErrTypeOperationNotSent, notPreparedMessage(op, err), err)
	}
	return a.claimRunning(ctx, op, decision, permit, facts)
}

// readFacts runs prepare for operation id under heartbeats, renewing the
// claim's lease with each beat when renew is not nil (nothing is claimed
// yet when it is nil). When the read fails, permit is told what the failure
// showed of the service: the read was sent, the operation was not.
func (a *Activities) readFacts(ctx context.Context, id string, permit *breaker.Permit, prepare func(context.Context) ([]byte, error), renew func(context.Context) error) ([]byte, error) {
	stop := a.heartbeat(ctx, a.heartbeatInterval(ctx),
		func() any { return OperationHeartbeat{OperationID: id, Step: stepPreparing} }, renew)
	facts, err := prepare(ctx)
	stop()
	if err != nil {
		permit.Done(toolHealth(err))
	}
	return facts, err
}

// claim is the ledger's Claim. A policy decision the claim recorded is
// counted in capstan_policy_decisions_total, as recordDecision counts one
// recorded alone, whatever the claim's answer.
func (a *Activities) claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	res, err := a.Ledger.Claim(ctx, req)
	if res.DecisionCreated && res.Decision != nil {
		a.Metrics.PolicyDecision(res.Decision.Effect, res.Decision.Rule)
	}
	return res, err
}

// notClaimed is begin's answer when the claim failed (err) or was not
// granted: the stored record and done for an operation that already
// succeeded, otherwise the application error the workflow expects.
func (a *Activities) notClaimed(op ledger.Operation, claim ledger.ClaimResult, err error) (ledger.Operation, bool, error) {
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return ledger.Operation{}, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("operation %s was already used for a different %s request", op.ID, op.Kind), contract.ErrTypeOperationConflict, err)
	case err != nil:
		return ledger.Operation{}, false, fmt.Errorf("claim operation %s: %w", op.ID, err)
	}
	switch claim.Status {
	case ledger.AlreadySucceeded:
		return claim.Op, true, nil
	case ledger.InProgress:
		return ledger.Operation{}, false, a.inProgress(op.ID, claim.Op)
	case ledger.MustReconcile:
		return ledger.Operation{}, false, unknownOperation(op.ID, claim.Op.State, nil)
	case ledger.DecidedOtherwise:
		if claim.Decision != nil {
			return ledger.Operation{}, false, &decidedOtherwise{stored: *claim.Decision}
		}
		return ledger.Operation{}, false, fmt.Errorf("claim operation %s: decided otherwise, and the ledger did not say how", op.ID)
	default:
		return ledger.Operation{}, false, fmt.Errorf("claim operation %s: unexpected status %q", op.ID, claim.Status)
	}
}

// notPrepared releases the claim of an operation whose facts could not be
// read: nothing was sent, so it is ABSENT and may be claimed again. The
// release is a ledger write that must not be lost to the activity's
// cancellation; if it fails, the claim runs out with its lease instead.
func (a *Activities) notPrepared(ctx context.Context, op ledger.Operation, fence int64, cause error) error {
	rctx, cancel := recordContext(ctx)
	defer cancel()
	if err := a.Ledger.Release(rctx, op.ID, fence); err != nil {
		return fmt.Errorf("%s was not sent: reading what it needs recorded first failed: %w; and releasing operation %s failed: %w",
			op.Kind, cause, op.ID, err)
	}
	return a.notSent(ctx, contract.ErrTypeOperationNotSent, notPreparedMessage(op, cause), cause)
}

// notPreparedMessage says that op was not sent because the read before it
// failed with cause.
func notPreparedMessage(op ledger.Operation, cause error) string {
	return fmt.Sprintf("%s was not sent: reading what it needs recorded first failed: %v", op.Kind, cause)
}

// unknownOperation is the error for an operation whose outcome is not known:
// never retried by Temporal, since only a reconciler may decide.
func unknownOperation(id string, state capstan.Outcome, cause error) error {
	msg := fmt.Sprintf("operation %s is %s: it may have taken effect and must be reconciled before anything else is sent", id, state)
	if cause != nil {
		msg += " (" + cause.Error() + ")"
	}
	return temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeOperationUnknown, nil, string(state))
}

// recordTimeout bounds one ledger write that records what an external call
// did.
const recordTimeout = 15 * time.Second

// recordContext is the context of the ledger writes that record what an
// external call did. The activity's cancellation — a cancelled task, a
// worker shutting down, the activity's own deadline — must not keep the
// ledger from learning what happened, so the context is detached from ctx's
// cancellation and bounded by its own timeout instead.
func recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// maxRetryAfter bounds the wait a rate-limited service may impose on one
// retry. A longer wait is cut to it, and the error says so: the retry then
// finds the service still limited and waits again (go-github even refuses
// locally, sending nothing), within the activity's retry policy.
const maxRetryAfter = 10 * time.Minute

// notSent is the retryable application error, of type errType, of an
// operation the external system did not take (it is ABSENT in the ledger).
// When cause carries a rate limit's wait (tool.RetryAfterError), Temporal
// retries after that wait, at least a second and at most maxRetryAfter,
// plus jitter; otherwise after the activity's jittered backoff.
func (a *Activities) notSent(ctx context.Context, errType, msg string, cause error) error {
	opts := temporal.ApplicationErrorOptions{Cause: cause, NextRetryDelay: a.backoff(ctx)}
	if wait, ok := tool.RetryAfter(cause); ok {
		opts.NextRetryDelay = backoff.AfterWait.Delay(1, min(max(wait, time.Second), maxRetryAfter), a.Random())
		if wait > maxRetryAfter {
			msg += fmt.Sprintf("; the service asked to wait %s, longer than capstan waits at once: retrying after %s", wait, opts.NextRetryDelay)
		} else {
			msg += fmt.Sprintf("; retrying after %s, as the service asked", opts.NextRetryDelay)
		}
	}
	return temporal.NewApplicationErrorWithOptions(msg, errType, opts)
}

// inProgress asks Temporal to retry once the other holder's lease has run
// out (plus jitter): then the operation is either finished or must be
// reconciled.
func (a *Activities) inProgress(id string, op ledger.Operation) error {
	wait := op.LeaseExpiresAt.Sub(a.Now()) + time.Second
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("operation %s is held by %s until %s", id, op.LeaseOwner, op.LeaseExpiresAt.UTC().Format(time.RFC3339)),
		contract.ErrTypeOperationInProgress, temporal.ApplicationErrorOptions{NextRetryDelay: backoff.AfterWait.Delay(1, max(wait, time.Second), a.Random())})
}

// owner names the lease holder: this worker and this activity attempt.
func (a *Activities) owner(ctx context.Context) string {
	if !activity.IsActivity(ctx) {
		return a.Identity
	}
	return fmt.Sprintf("%s#%d", a.Identity, activity.GetInfo(ctx).Attempt)
}

// RequestHash is the ledger's request hash of an operation: the kind and the
// canonical bytes of what defines its effect.
func RequestHash(kind string, effect []byte) string {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(effect)
	return hex.EncodeToString(h.Sum(nil))
}

func preview(s string) string {
	const n = 160
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
