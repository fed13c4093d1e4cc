package activities

import (
	"context"
	"errors"
	"strings"
	"unicode"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// This file is what the activities tell an operator: metrics counted at the
// end of each activity (and, in ledger_counter.go, wherever the ledger
// records an operation's state), and the lines logged about a failed model
// attempt. Each activity first puts its ids into its context
// (internal/logids), so every line logged with it carries them.

// Metrics receives what the activities count; *metrics.Metrics satisfies it.
// Deps.Metrics nil counts nothing.
type Metrics interface {
	// ModelAttempt counts a model attempt that ended with outcome.
	ModelAttempt(provider, model string, outcome model.Outcome)
	// ModelTokens adds the tokens of a completed attempt.
	ModelTokens(provider, model string, usage model.Usage)
	// Retry counts a failed attempt that is tried again, and why.
	Retry(activity, reason string)
	// OperationSettled counts an operation of kind reaching state in the
	// ledger.
	OperationSettled(kind string, state capstan.Outcome)
	// ReconcileVerdict counts a verdict recorded on an operation of kind.
	ReconcileVerdict(kind string, verdict capstan.Verdict)
	// Delivery counts a delivery attempt to target ("slack",
	// "github_comment") that ended in state (see deliveryState).
	Delivery(target string, state capstan.Outcome)
	// PolicyDecision counts a decision of a task's policy on a tool call
	// (decision: allow, deny, require_approval; rule: the rule that made it).
	PolicyDecision(decision, rule string)
}

type noMetrics struct{}

func (noMetrics) ModelAttempt(string, string, model.Outcome) {}
func (noMetrics) ModelTokens(string, string, model.Usage)    {}
func (noMetrics) Retry(string, string)                       {}
func (noMetrics) OperationSettled(string, capstan.Outcome)   {}
func (noMetrics) ReconcileVerdict(string, capstan.Verdict)   {}
func (noMetrics) Delivery(string, capstan.Outcome)           {}
func (noMetrics) PolicyDecision(string, string)              {}

// guardEnds are the outcomes of a failed model attempt after which the turn
// guard tries nothing again (docs/design.md §4.4): every other outcome
// (not_sent, overloaded, cut_idle, invalid, worker_lost, unknown, waiting
// out a breaker) is tried again within its budget. cancelled counts as an
// end: at the activity it is mostly the task itself being cancelled, and a
// lost worker is reported as worker_lost.
var guardEnds = map[model.Outcome]bool{
	model.OutcomeRejected: true, model.OutcomeCutTotal: true, model.OutcomeOverflow: true, model.OutcomeCancelled: true,
}

// observeModelTurn counts a ModelTurn's attempt, its tokens and, when the
// attempt failed in a way that is tried again, a retry; and logs how a
// failed attempt ended. A replayed turn called no model and counts nothing.
func (a *Activities) observeModelTurn(ctx context.Context, in contract.ModelTurnInput, res contract.ModelTurnResult, err error) {
	ref, perr := model.ParseRef(in.Model)
	if perr != nil {
		return // a WorkerConfig error: no attempt was made
	}
	if err == nil {
		if !res.Replayed {
			a.Metrics.ModelAttempt(ref.Provider, ref.Model, model.OutcomeCompleted)
			a.Metrics.ModelTokens(ref.Provider, ref.Model, res.Usage)
		}
		return
	}
	r, ok := contract.AttemptReportOf(err)
	if !ok {
		a.countRetry(ctx, "ModelTurn", err)
		return
	}
	a.Metrics.ModelAttempt(ref.Provider, ref.Model, r.Outcome)
	if !guardEnds[r.Outcome] {
		a.Metrics.Retry(activityName(ctx, "ModelTurn"), string(r.Outcome))
	}
	a.Logger.InfoContext(ctx, "model attempt failed", "model", in.Model, "outcome", string(r.Outcome),
		"phase", string(r.Phase), "http_status", r.HTTPStatus, "events", r.Events, "message", r.Message)
}

// observeDeliver counts how a delivery attempt ended and, when it is tried
// again, a retry.
func (a *Activities) observeDeliver(ctx context.Context, in contract.DeliverInput, res contract.DeliverResult, err error) {
	target := "slack"
	if in.Comment != nil {
		target = githubtools.NameComment
	}
	a.countRetry(ctx, "Deliver", err)
	if state, ok := deliveryState(res, err); ok {
		a.Metrics.Delivery(target, state)
	}
}

// deliveryState names how a delivery attempt ended, as far as the activity
// knows: succeeded (posted; not counted again when the ledger already had
// it), not_sent (nothing was posted; Temporal retries), unknown (it may have
// been posted; a reconciler decides) or failed (the target refused it; the
// workflow dead-letters it). Other failures (ledger trouble, a worker
// without a Slack client) are not a delivery's ending.
func deliveryState(res contract.DeliverResult, err error) (capstan.Outcome, bool) {
	if err == nil {
		return capstan.OutcomeSucceeded, !res.Replayed
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return "", false
	}
	switch appErr.Type() {
	case contract.ErrTypeDeliveryNotSent, contract.ErrTypeOperationNotSent:
		return capstan.OutcomeNotSent, true
	case contract.ErrTypeOperationUnknown:
		return capstan.OutcomeUnknown, true
	case contract.ErrTypeDeliveryFailed:
		return capstan.OutcomeFailed, true
	}
	return "", false
}

// countRetry counts err as a retry of the activity when Temporal tries the
// activity again after it (see retryReason).
func (a *Activities) countRetry(ctx context.Context, fallbackName string, err error) {
	if reason, ok := retryReason(ctx, err); ok {
		a.Metrics.Retry(activityName(ctx, fallbackName), reason)
	}
}

// retryReason says why an activity that failed with err is tried again:
// rate_limited (the service named a wait), not_sent, worker_shutdown, the
// application error's type in snake case (operation_in_progress,
// breaker_open, …), or error for any other retryable failure. ok is false
// for success, for an error Temporal does not retry, and for a cancelled
// activity.
func retryReason(ctx context.Context, err error) (reason string, ok bool) {
	if err == nil {
		return "", false
	}
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), worker.ErrWorkerShutdown) {
			return "worker_shutdown", true
		}
		return "", false // cancelled or timed out: Temporal decides, and says so
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return "error", true
	}
	if appErr.NonRetryable() {
		return "", false
	}
	switch appErr.Type() {
	case contract.ErrTypeOperationNotSent, contract.ErrTypeDeliveryNotSent:
		if _, limited := tool.RetryAfter(err); limited {
			return "rate_limited", true
		}
		return "not_sent", true
	case "":
		return "error", true
	}
	return snakeCase(appErr.Type()), true
}

// activityName is the running activity's type, or fallback outside an
// activity (a direct call in a test).
func activityName(ctx context.Context, fallback string) string {
	if activity.IsActivity(ctx) {
		return activity.GetInfo(ctx).ActivityType.Name
	}
	return fallback
}

// snakeCase turns an error type such as "OperationInProgress" into
// "operation_in_progress".
func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
