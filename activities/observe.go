package activities

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools"
)

// This file is what the activities tell an operator: metrics, counted at the
// end of each activity and wherever the ledger records an operation's state,
// and the ids every log line of an activity carries (internal/logids).

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
	OperationSettled(kind string, state ledger.State)
	// ReconcileVerdict counts a verdict recorded on an operation of kind.
	ReconcileVerdict(kind, verdict string)
	// Delivery counts a delivery attempt to target ("slack",
	// "github_comment") that ended in state (see deliveryState).
	Delivery(target, state string)
}

type noMetrics struct{}

func (noMetrics) ModelAttempt(string, string, model.Outcome) {}
func (noMetrics) ModelTokens(string, string, model.Usage)    {}
func (noMetrics) Retry(string, string)                       {}
func (noMetrics) OperationSettled(string, ledger.State)      {}
func (noMetrics) ReconcileVerdict(string, string)            {}
func (noMetrics) Delivery(string, string)                    {}

// guardRetries are the outcomes of a failed model attempt that the turn
// guard tries again within its budgets (docs/design.md §4.4); the others end
// the task. cancelled is left out: at the activity it is mostly the task
// itself being cancelled, and a lost worker is reported as worker_lost.
var guardRetries = map[model.Outcome]bool{
	model.OutcomeNotSent: true, model.OutcomeOverloaded: true, model.OutcomeCutIdle: true,
	model.OutcomeInvalid: true, model.OutcomeWorkerLost: true, model.OutcomeUnknown: true,
}

// observeModelTurn counts a ModelTurn's attempt, its tokens and, when the
// attempt failed in a way that is tried again, a retry; and logs how a
// failed attempt ended. A replayed turn called no model and counts nothing.
func (a *Activities) observeModelTurn(ctx context.Context, in ModelTurnInput, res ModelTurnResult, err error) {
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
	r, ok := AttemptReportOf(err)
	if !ok {
		a.countRetry(ctx, "ModelTurn", err)
		return
	}
	a.Metrics.ModelAttempt(ref.Provider, ref.Model, r.Outcome)
	if guardRetries[r.Outcome] {
		a.Metrics.Retry(activityName(ctx, "ModelTurn"), string(r.Outcome))
	}
	a.Logger.InfoContext(ctx, "model attempt failed", "model", in.Model, "outcome", string(r.Outcome),
		"phase", string(r.Phase), "http_status", r.HTTPStatus, "events", r.Events, "message", r.Message)
}

// observeDeliver counts how a delivery attempt ended and, for a Slack post,
// a retry (a comment is an ExecuteTool, which counts its own).
func (a *Activities) observeDeliver(ctx context.Context, in DeliverInput, res DeliverResult, err error) {
	target := "slack"
	if in.Comment != nil {
		target = "github_comment"
	} else {
		a.countRetry(ctx, "Deliver", err)
	}
	if state, ok := deliveryState(res, err); ok {
		a.Metrics.Delivery(target, state)
	}
}

// deliveryState names how a delivery attempt ended, as far as the activity
// knows: ACKED (posted; not counted again when the ledger already had it),
// NOT_SENT (nothing was posted; Temporal retries), AMBIGUOUS (it may have
// been posted; a reconciler decides) or REFUSED (the target refused it; the
// workflow dead-letters it). Other failures (ledger trouble, a worker
// without a Slack client) are not a delivery's ending.
func deliveryState(res DeliverResult, err error) (string, bool) {
	if err == nil {
		return "ACKED", !res.Replayed
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return "", false
	}
	switch appErr.Type() {
	case ErrTypeDeliveryNotSent, ErrTypeOperationNotSent:
		return "NOT_SENT", true
	case ErrTypeOperationUnknown:
		return "AMBIGUOUS", true
	case ErrTypeDeliveryFailed:
		return "REFUSED", true
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
	case ErrTypeOperationNotSent, ErrTypeDeliveryNotSent:
		if _, limited := tools.RetryAfter(err); limited {
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
	state ledger.State
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
	l.settled(ctx, id, fence, ledger.StateAbsent, err)
	return err
}

func (l *countingLedger) hold(id string, fence int64, kind string, state ledger.State) {
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
func (l *countingLedger) settled(ctx context.Context, id string, fence int64, state ledger.State, err error) {
	h := l.take(id, fence)
	if err != nil || h.kind == "" || h.state == state {
		return
	}
	l.metrics.OperationSettled(h.kind, state)
	l.logger.InfoContext(logids.With(ctx, logids.IDs{OperationID: id}), "operation settled",
		"kind", h.kind, "state", string(state), "from", string(h.state))
}
