package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
)

// This file gives every retry delay of a tool call, a delivery or a
// reconciliation its jitter (docs/design.md §7). Temporal's retry policy
// has none: a pool of workers whose calls failed together would all try
// again together. So capstan draws the delay of each retry itself, with
// internal/backoff and Deps.Random, and hands it to Temporal as the error's
// next-retry delay. A wait a service, a breaker or another claim's lease
// named is the floor of backoff.AfterWait: every caller told to wait comes
// back no sooner than told, and not all at the same instant.

// Backoff of an activity whose retry policy the server did not send:
// Temporal's own defaults.
const (
	defaultRetryInitial     = time.Second
	defaultRetryCoefficient = 2.0
)

// backoff is the delay before the next attempt of this activity: its retry
// policy's interval for the attempt (initial × coefficient^(attempt-1), at
// most the maximum interval), with equal jitter — between half of it and
// all of it — so the policy's pace holds on average and no retry comes at
// once.
func (a *Activities) backoff(ctx context.Context) time.Duration {
	initial, coefficient, maximum, attempt := defaultRetryInitial, defaultRetryCoefficient, time.Duration(0), int32(1)
	if activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		attempt = max(info.Attempt, 1)
		if p := info.RetryPolicy; p != nil {
			if p.InitialInterval > 0 {
				initial = p.InitialInterval
			}
			if p.BackoffCoefficient >= 1 {
				coefficient = p.BackoffCoefficient
			}
			maximum = p.MaximumInterval
		}
	}
	if maximum <= 0 {
		maximum = 100 * initial // Temporal's default maximum interval
	}
	// Equal jitter: the first half of the policy's interval is a floor,
	// full jitter draws the second.
	half := backoff.Policy{Base: initial, Cap: maximum, Multiplier: coefficient}.Span(int(attempt)) / 2
	return backoff.Policy{Base: half, Cap: half}.Delay(1, half, a.Random())
}

// retryable is err as the activity hands it to Temporal: a failure Temporal
// will retry that names no delay of its own is given the jittered backoff;
// application errors (which choose their delay where they are made) and
// cancellations pass unchanged.
func (a *Activities) retryable(ctx context.Context, err error) error {
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case err == nil, errors.As(err, &appErr), errors.As(err, &canceled), errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, ledger.ErrUnavailable):
		// Whatever asked the ledger, nothing was sent after it: the paths
		// that sent something record it with record, which never
		// returns this error.
		return a.ledgerDown(ctx, err)
	case errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), contract.ErrTypeTransient,
		temporal.ApplicationErrorOptions{NextRetryDelay: a.backoff(ctx)})
}
