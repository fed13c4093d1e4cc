package activities

import (
	"context"
	"errors"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// This file gives every retry delay of a tool call, a delivery or a
// reconciliation its jitter (docs/design.md §7). Temporal's retry policy
// has none: a pool of workers whose calls failed together would all try
// again together. So capstan draws the delay of each retry itself and hands
// it to Temporal as the error's next-retry delay.

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
	d := time.Duration(min(float64(initial)*math.Pow(coefficient, float64(attempt-1)), float64(maximum)))
	return d/2 + time.Duration(a.Random()*float64(d/2))
}

// retryable is err as the activity hands it to Temporal: a failure Temporal
// will retry that names no delay of its own is given the jittered backoff;
// application errors (which choose their delay where they are made) and
// cancellations pass unchanged.
func (a *Activities) retryable(ctx context.Context, err error) error {
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case err == nil, errors.As(err, &appErr), errors.As(err, &canceled),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), ErrTypeTransient,
		temporal.ApplicationErrorOptions{NextRetryDelay: a.backoff(ctx)})
}
