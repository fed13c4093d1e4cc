package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools"
)

// Activity options, one set per call type. They are the only place timeouts
// and retry policies of activities are chosen.

// modelTurnOptions: Temporal never retries a model attempt — the turn guard
// does, so every retry is a new attempt id and a journalled decision. The
// start-to-close timeout is the activity's own total limit plus a margin, so
// capstan's watchdogs decide and say why; the heartbeat timeout notices a
// dead worker in ~30 s.
func modelTurnOptions(limits model.Limits, summary string) workflow.ActivityOptions {
	limits = limits.WithDefaults()
	return workflow.ActivityOptions{
		StartToCloseTimeout: limits.Total + time.Minute,
		HeartbeatTimeout:    limits.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	}
}

// toolOptions: reads retry freely; mutations retry only on errors that prove
// nothing was sent or that another claim is live (waiting out its lease, or
// a rate limit, as the error's next-retry delay says), never on an UNKNOWN
// outcome or a conflict, which need a reconciler or a person. The activity
// heartbeats on a ticker whatever its call does, so the heartbeat timeout
// (the task's, CAPSTAN_HEARTBEAT_TIMEOUT) notices a dead worker long before
// the start-to-close timeout would.
func toolOptions(class tools.Class, summary string, limits model.Limits) workflow.ActivityOptions {
	o := workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    limits.WithDefaults().HeartbeatTimeout,
		// A cancelled task waits for a call in flight to end, so what it
		// did is recorded rather than guessed.
		WaitForCancellation: true,
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    5,
			NonRetryableErrorTypes: []string{
				activities.ErrTypeOperationConflict,
				activities.ErrTypeOperationUnknown,
				activities.ErrTypeWorkerConfig,
			},
		},
	}
	if class == tools.ReadOnly {
		o.RetryPolicy.MaximumAttempts = 3
	}
	return o
}

// reconcileOptions: the activity asks again by itself through the
// consistency window, heartbeating, so its start-to-close covers the window
// plus a margin; Temporal retries it when its worker is lost.
func reconcileOptions(window, heartbeat time.Duration, summary string) workflow.ActivityOptions {
	if window <= 0 {
		window = activities.DefaultReconcileWindow
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout: window + 2*time.Minute,
		HeartbeatTimeout:    heartbeat,
		WaitForCancellation: true,
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        5,
			NonRetryableErrorTypes: []string{activities.ErrTypeWorkerConfig},
		},
	}
}

// deliverOptions: three tries, then the delivery is dead-lettered (docs/design.md §6).
// It heartbeats like a tool call.
func deliverOptions(summary string, limits model.Limits) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    limits.WithDefaults().HeartbeatTimeout,
		WaitForCancellation: true,
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    2 * time.Second,
			BackoffCoefficient: 2,
			MaximumAttempts:    3,
			NonRetryableErrorTypes: []string{
				activities.ErrTypeOperationConflict,
				activities.ErrTypeOperationUnknown,
				activities.ErrTypeDeliveryFailed,
				activities.ErrTypeWorkerConfig,
			},
		},
	}
}
