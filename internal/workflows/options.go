package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// Timeouts, heartbeats and retry policies of every activity, per dependency:
// activityTable is the one place they are chosen (docs/configuration.md's "Timeouts and
// retries" shows the same table). The options functions below only read it.
//
//	activity               dependency (breaker)       start-to-close          heartbeat  Temporal's retries                     when the breaker is open
//	ModelTurn              model/<provider>           attempt's total + 1 min task's     none: the turn guard decides (§4.4)    the guard waits the time left; no budget spent
//	ExecuteTool read_only  github/read                2 min                   task's     3 attempts, 1 s doubling to 30 s      the workflow waits, then a new activity
//	ExecuteTool mutation   github/write               2 min                   task's     5 attempts, 1 s doubling to 30 s      the workflow waits, then a new activity
//	Deliver                slack/post, github/write   1 min                   task's     3 attempts, 2 s doubling               the workflow waits, then a new activity
//	Reconcile              github, slack (reads)      window + 2 min          task's     5 attempts, 1 s doubling to 30 s      (not guarded: it asks within its window; the ledger's breaker is waited out since changeLedgerOutageWaits)
//	TruncateTranscript     the ledger                 1 min                   task's     5 attempts, 1 s doubling to 30 s      (no breaker: no external call)
//
// Every activity also goes through the worker's ledger breaker ("ledger"):
// an activity the unreachable ledger stopped before it sent anything ends
// BreakerOpen of "ledger", which the workflow waits out like the others.
//
// "task's" heartbeat is the task's heartbeat timeout (CAPSTAN_HEARTBEAT_TIMEOUT,
// default 30 s): every activity heartbeats on a ticker, so a dead worker is
// noticed then, not at the start-to-close timeout. Temporal's policies have
// no jitter: every retryable error of an activity carries its own jittered
// next-retry delay (internal/activities/retry.go). A BreakerOpen error is never
// retried by Temporal (in tasks since changeWorkflowWaitsOutBreakers): it is
// not a failure, so it must not spend attempts budgeted for failures, and
// only the workflow can say in the journal and the current details which
// breaker it waits for.
var activityTable = map[activityKind]activityRow{
	kindModelTurn: {startToClose: time.Minute, retry: temporal.RetryPolicy{MaximumAttempts: 1}},
	kindToolRead: {startToClose: 2 * time.Minute, waitForCancellation: true, retry: temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 3,
		NonRetryableErrorTypes: []string{contract.ErrTypeOperationConflict, contract.ErrTypeOperationUnknown, contract.ErrTypeWorkerConfig},
	}},
	kindToolMutation: {startToClose: 2 * time.Minute, waitForCancellation: true, retry: temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 5,
		NonRetryableErrorTypes: []string{contract.ErrTypeOperationConflict, contract.ErrTypeOperationUnknown, contract.ErrTypeWorkerConfig},
	}},
	kindDeliver: {startToClose: time.Minute, waitForCancellation: true, retry: temporal.RetryPolicy{
		InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumAttempts: maxDeliveryTries,
		NonRetryableErrorTypes: []string{contract.ErrTypeOperationConflict, contract.ErrTypeOperationUnknown,
			contract.ErrTypeDeliveryFailed, contract.ErrTypeWorkerConfig},
	}},
	kindReconcile: {startToClose: 2 * time.Minute, waitForCancellation: true, retry: temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 5,
		NonRetryableErrorTypes: []string{contract.ErrTypeWorkerConfig},
	}},
	kindTruncate: {startToClose: time.Minute, retry: temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 5,
	}},
}

// activityKind is a row of activityTable: an activity, and for ExecuteTool
// the class of the tool, which decides its breaker.
type activityKind string

// The rows of activityTable.
const (
	kindModelTurn    activityKind = "ModelTurn"
	kindToolRead     activityKind = "ExecuteTool read_only"
	kindToolMutation activityKind = "ExecuteTool mutation"
	kindDeliver      activityKind = "Deliver"
	kindReconcile    activityKind = "Reconcile"
	kindTruncate     activityKind = "TruncateTranscript"
)

// activityRow is one activity's fixed options.
type activityRow struct {
	// startToClose is the whole timeout, or for ModelTurn and Reconcile the
	// margin added to the attempt's total limit or the consistency window.
	startToClose time.Duration
	// waitForCancellation: a cancelled task waits for the call in flight
	// to end, so what it did is recorded rather than guessed.
	waitForCancellation bool
	retry               temporal.RetryPolicy
}

// options builds the activity options of row k. Every activity heartbeats,
// with the task's heartbeat timeout. breakerWaits adds BreakerOpen to the
// errors Temporal does not retry: the workflow waits for the breaker itself.
func (k activityKind) options(summary string, limits model.Limits, breakerWaits bool) workflow.ActivityOptions {
	row := activityTable[k]
	retry := row.retry
	retry.NonRetryableErrorTypes = append([]string(nil), row.retry.NonRetryableErrorTypes...)
	if breakerWaits && k != kindModelTurn && k != kindReconcile {
		retry.NonRetryableErrorTypes = append(retry.NonRetryableErrorTypes, contract.ErrTypeBreakerOpen)
	}
	return workflow.ActivityOptions{
		StartToCloseTimeout: row.startToClose,
		HeartbeatTimeout:    limits.WithDefaults().HeartbeatTimeout,
		WaitForCancellation: row.waitForCancellation,
		Summary:             summary,
		RetryPolicy:         &retry,
	}
}

// modelTurnOptions: Temporal never retries a model attempt — the turn guard
// does, so every retry is a new attempt id and a journalled decision. The
// start-to-close timeout is the activity's own total limit plus a margin, so
// capstan's watchdogs decide and say why; the heartbeat timeout notices a
// dead worker in ~30 s.
func modelTurnOptions(limits model.Limits, summary string) workflow.ActivityOptions {
	limits = limits.WithDefaults()
	o := kindModelTurn.options(summary, limits, false)
	o.StartToCloseTimeout += limits.Total
	return o
}

// toolOptions: reads retry freely; mutations retry only on errors that prove
// nothing was sent or that another claim is live (waiting out its lease, or
// a rate limit, as the error's next-retry delay says), never on an unknown
// outcome or a conflict, which need a reconciler or a person.
func toolOptions(class capstan.Class, summary string, limits model.Limits, breakerWaits bool) workflow.ActivityOptions {
	if class == capstan.ClassReadOnly {
		return kindToolRead.options(summary, limits, breakerWaits)
	}
	return kindToolMutation.options(summary, limits, breakerWaits)
}

// reconcileOptions: the activity asks again by itself through the
// consistency window, heartbeating, so its start-to-close covers the window
// plus a margin; Temporal retries it when its worker is lost.
func reconcileOptions(window, heartbeat time.Duration, summary string) workflow.ActivityOptions {
	if window <= 0 {
		window = config.DefaultReconcileWindow
	}
	o := kindReconcile.options(summary, model.Limits{HeartbeatTimeout: heartbeat}, false)
	o.StartToCloseTimeout += window
	return o
}

// deliverOptions: three tries, then the delivery is dead-lettered
// (docs/design.md §6).
func deliverOptions(summary string, limits model.Limits, breakerWaits bool) workflow.ActivityOptions {
	return kindDeliver.options(summary, limits, breakerWaits)
}
