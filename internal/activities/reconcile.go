package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// Backoff between the questions of one Reconcile while the effect is not
// seen yet or the question could not be asked: full jitter, doubling from
// 0.5 s to 5 s, never past the end of the consistency window. The first
// question is asked at once and found is concluded the moment it is seen
// (issue 18: ask early, conclude late); only absent waits for the window.
var reconcileBackoff = backoff.Policy{Base: 500 * time.Millisecond, Cap: 5 * time.Second}

// ReconcileProgress is Reconcile's heartbeat detail.
type ReconcileProgress = contract.ReconcileProgress

// recoveredNote is the tool message, and the ledger's result, of an
// operation found after the fact: the model learns that its call took effect
// although nobody saw the answer.
type recoveredNote struct {
	Recovered  bool            `json:"recovered"`
	Note       string          `json:"note"`
	ExternalID string          `json:"external_id,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`      // what the tool answered, when the ledger has it
	ResolvedBy string          `json:"resolved_by,omitempty"` // the person who found it, when one did
}

const (
	noteFoundByReconciler = "capstan could not confirm this call when it was made; it found afterwards that the call had taken effect"
	noteFoundByPerson     = "capstan could not confirm this call when it was made; a person confirmed afterwards that it had taken effect"
	noteFoundInLedger     = "capstan could not confirm this call when it was made; its ledger shows that the call had taken effect"
)

// Reconcile finds out what became of an operation whose outcome is unknown
// (docs/design.md §5.4, §5.5) and records the verdict in the ledger. It first
// takes the operation under a new fence, so the attempt that sent the
// request — should it still be alive — can never overwrite the verdict.
//
//   - When the ledger already knows the outcome, that is the answer and
//     nothing is asked: SUCCEEDED is found; ABSENT, FAILED are absent.
//   - When in.Resolution is set, a person decided: found is recorded as
//     SUCCEEDED with the URL they gave, absent as ABSENT. A person's found
//     stands even over a ledger that records the operation as not having
//     taken effect (ABSENT once the re-executions were spent, say).
//   - Otherwise the lookup of whatever made the operation (the tool, or
//     the delivery) is asked, by the reconcilers' window and verdict rules
//     (reconcilers.Set.Reconcile): again, with jittered backoff, while the
//     consistency window lasts — from the ledger's last record of the
//     attempt that sent it (windowStart), kept on the ledger's clock as
//     this worker reckons it (ledgerClock) — and the effect is not seen
//     or the question cannot be asked. Found is SUCCEEDED. Not seen by a
//     question asked at the end of the window is ABSENT. Several
//     candidates, no lookup for the operation's kind, or a question that
//     still cannot be asked at the end of the window is indeterminate:
//     NEEDS_HUMAN, with the reason. A lookup whose client this worker
//     lacks fails the activity as misconfigured.
//
// A found tool operation commits a tool message for in.ToolCallID telling
// the model the call was recovered; its ref is the result's Item. A live
// lease held by another attempt is a contract.ErrTypeOperationInProgress error that
// Temporal retries when the lease ends. If the activity is cancelled before
// a verdict, the operation is handed back (lease cleared, still unknown) so
// the next attempt can take it at once. Retryable failures carry a
// jittered delay.
func (a *Activities) Reconcile(ctx context.Context, in contract.ReconcileInput) (contract.ReconcileResult, error) {
	ctx = scoped(logids.With(ctx, logids.IDs{TaskID: in.TaskID, OperationID: in.OperationID}), in.Scope, in.TaskID)
	ctx, span := startReconcileSpan(ctx, in)
	res, err := a.reconcile(ctx, in)
	err = a.retryable(ctx, err)
	a.endReconcileSpan(span, res, err)
	a.countRetry(ctx, "Reconcile", err)
	return res, err
}

func (a *Activities) reconcile(ctx context.Context, in contract.ReconcileInput) (contract.ReconcileResult, error) {
	res := contract.ReconcileResult{OperationID: in.OperationID}
	if err := validResolution(in.Resolution); err != nil {
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cannot record the resolution of operation %s: %v", in.OperationID, err), contract.ErrTypeInvalidResolution, nil)
	}
	window := in.Window
	if window <= 0 {
		window = config.DefaultReconcileWindow
	}
	// The lease must outlast the questions still to come, at most the whole
	// window, and the verdict.
	lease := a.lease(ctx) + window
	// The row as the attempt that sent the operation left it: the window
	// runs from its last record (windowStart).
	sent, err := a.Ledger.Get(ctx, in.OperationID)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return res, fmt.Errorf("read operation %s before reconciling it: %w", in.OperationID, err)
	}
	op, err := a.Ledger.TakeForReconcile(context.WithoutCancel(ctx), in.OperationID, a.owner(ctx), lease)
	clock := ledgerClock(a.Now, op.UpdatedAt, a.Now())
	var held *ledger.LeaseHeldError
	switch {
	case errors.Is(err, ledger.ErrSettled) && overridesLedger(in.Resolution, op):
		return a.recordResolutionOverLedger(ctx, in, op)
	case errors.Is(err, ledger.ErrSettled):
		return a.settled(ctx, in, op)
	case errors.As(err, &held):
		return res, a.inProgress(in.OperationID, ledger.Operation{LeaseOwner: held.Owner, LeaseExpiresAt: held.ExpiresAt})
	case errors.Is(err, ledger.ErrNotFound):
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"operation %s is not in this worker's ledger; is CAPSTAN_LEDGER_DSN the ledger the task's workers share?", in.OperationID),
			contract.ErrTypeWorkerConfig, err)
	case err != nil:
		return res, fmt.Errorf("take operation %s for reconciliation: %w", in.OperationID, err)
	}
	if in.Resolution != nil {
		in, refusal, err := a.readBackResolution(ctx, in, op)
		switch {
		case err != nil:
			return res, a.handBack(ctx, op, err)
		case refusal != "":
			return a.refuseResolution(ctx, op, refusal, true)
		}
		return a.recordResolution(ctx, in, op)
	}
	q, err := a.question(ctx, in, op, windowStart(sent, op).Add(window), window)
	if err != nil {
		return res, a.handBack(ctx, op, err)
	}
	return a.askUntilSure(ctx, in, op, q, clock)
}

// windowStart is where the consistency window of a reconciliation starts,
// on the ledger's clock (docs/design.md §5.5): the last time the ledger
// recorded the operation before this reconciliation took it (sent, as Get
// read it) — the attempt's running mark, a renewal of its lease, or the
// unknown outcome it recorded — which is no earlier than the send. It is
// never a worker's or the workflow's clock, which may disagree with the
// ledger's by minutes and would cut the window short. Without that record
// the window starts at the take.
func windowStart(sent, taken ledger.Operation) time.Time {
	if sent.ID == taken.ID && !sent.UpdatedAt.IsZero() && sent.UpdatedAt.Before(taken.UpdatedAt) {
		return sent.UpdatedAt
	}
	return taken.UpdatedAt
}

// ledgerClock is the ledger's clock as this worker reckons it: its own
// clock (now) moved by how far the ledger's was ahead of it when the ledger
// stamped the take (at) and this worker had its answer (seen). The answer
// comes after the stamp, so the reckoning is never ahead of the ledger's
// clock: a window kept on it ends no earlier than on the ledger's, however
// far this worker's clock is off.
func ledgerClock(now func() time.Time, at, seen time.Time) func() time.Time {
	if at.IsZero() {
		return now
	}
	off := at.Sub(seen)
	return func() time.Time { return now().Add(off) }
}

// validResolution checks what a person said before anything is taken.
func validResolution(r *contract.Resolution) error {
	switch {
	case r == nil:
		return nil
	case r.Verdict == capstan.VerdictFound && r.ExternalID == "":
		return errors.New("found needs the URL of what the person saw")
	case r.Verdict == capstan.VerdictFound, r.Verdict == capstan.VerdictAbsent:
		return nil
	default:
		return fmt.Errorf("verdict %q, want %q or %q", r.Verdict, capstan.VerdictFound, capstan.VerdictAbsent)
	}
}

// question is what the reconcilers look for: the operation as the ledger
// holds it, with the arguments it was sent with. A worker without
// reconcilers fails as misconfigured.
func (a *Activities) question(ctx context.Context, in contract.ReconcileInput, op ledger.Operation, deadline time.Time, window time.Duration) (reconcilers.Question, error) {
	q := reconcilers.Question{Kind: op.Kind, Deadline: deadline, Window: window, Resend: in.Resend,
		Sent: tool.Sent{Call: tool.Call{OperationID: op.ID, Facts: op.Facts}, Since: op.CreatedAt}}
	if a.Reconcilers == nil {
		return q, temporal.NewNonRetryableApplicationError(
			"this worker has no reconcilers configured", contract.ErrTypeWorkerConfig, nil)
	}
	switch {
	case in.Arguments != "":
		args, err := a.Ledger.GetItem(ctx, in.Arguments)
		if err != nil {
			return q, fmt.Errorf("load arguments of operation %s: %w", op.ID, err)
		}
		q.Sent.Arguments = args
	case in.Channel != "":
		// A Slack delivery: the workflow gives its channel, not arguments.
		q.Sent.Arguments = slackpost.Arguments(in.Channel)
	}
	return q, nil
}

// askUntilSure runs the reconcilers' window and verdict rules over the
// operation (see Reconcile), heartbeating meanwhile, and records the
// verdict.
func (a *Activities) askUntilSure(ctx context.Context, in contract.ReconcileInput, op ledger.Operation, q reconcilers.Question, clock func() time.Time) (contract.ReconcileResult, error) {
	progress := &reconcileProgress{}
	if e, err := a.Reconcilers.Effect(q.Kind, q.Sent); err == nil {
		progress.p.LookingFor, progress.p.AbsentBy = e.Key(), q.Deadline // shown by starter follow
	}
	stop := a.startReconcileHeartbeat(ctx, progress)
	defer stop()
	// A lookup that waits of its own accord (Slack's Retry-After) says so
	// in the heartbeat and the log while it waits.
	actx := ctx
	ctx = tool.WithWaitNotice(ctx, func(why string) {
		progress.waiting(why)
		a.Logger.InfoContext(actx, "reconciler waiting", "operation_id", op.ID, "kind", op.Kind, "why", why)
		if activity.IsActivity(actx) {
			activity.RecordHeartbeat(actx, progress.get())
		}
	})

	ans, err := a.Reconcilers.Reconcile(ctx, q, reconcilers.Pace{Now: clock, Backoff: a.reconcileBackoff, Resending: a.resending(op.Kind),
		Asked: func(asked int, last string) {
			progress.set(asked, last)
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx, progress.get()) // the SDK throttles; the ticker covers a hanging question
			}
		}})
	res := contract.ReconcileResult{OperationID: op.ID, Asked: ans.Asked}
	switch {
	case errors.Is(err, tool.ErrNotConfigured):
		return res, a.handBack(ctx, op, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("this worker cannot reconcile operation %s: %v", op.ID, err), contract.ErrTypeWorkerConfig, err))
	case err != nil:
		return res, a.handBack(ctx, op, fmt.Errorf("reconciliation of operation %s: %w", op.ID, err))
	}
	res.Verdict, res.ExternalID, res.Reason = verdictOf[ans.State], ans.ExternalID, ans.Reason
	return a.recordVerdict(ctx, in, op, res, noteFoundByReconciler, ans.Key)
}

// verdictOf is the verdict of each state a reconciliation concludes with.
var verdictOf = map[capstan.Outcome]capstan.Verdict{
	capstan.OutcomeSucceeded:  capstan.VerdictFound,
	capstan.OutcomeAbsent:     capstan.VerdictAbsent,
	capstan.OutcomeNeedsHuman: capstan.VerdictIndeterminate,
}

// recordResolution records a person's verdict.
func (a *Activities) recordResolution(ctx context.Context, in contract.ReconcileInput, op ledger.Operation) (contract.ReconcileResult, error) {
	res := contract.ReconcileResult{OperationID: op.ID, Verdict: in.Resolution.Verdict}
	who := "a person"
	if in.Resolution.ResolvedBy != "" {
		who = in.Resolution.ResolvedBy
	}
	if res.Verdict == capstan.VerdictFound {
		res.ExternalID, res.Reason = in.Resolution.ExternalID, who+" confirmed that the operation took effect: "+in.Resolution.ExternalID
	} else {
		res.Reason = who + " confirmed that the operation did not take effect"
	}
	return a.recordVerdict(ctx, in, op, res, noteFoundByPerson, "")
}

// overridesLedger: a person found the effect of an operation the ledger
// records as settled without it (ABSENT, FAILED, DECLARED). Their answer
// is applied whatever the counters say; an absent needs no override.
func overridesLedger(r *contract.Resolution, op ledger.Operation) bool {
	return r != nil && r.Verdict == capstan.VerdictFound && op.State != capstan.OutcomeSucceeded
}

// recordResolutionOverLedger records a person's found on a settled
// operation: it takes the operation back under a new fence with a claim,
// which sends nothing, and writes the verdict under it. Should another
// attempt hold the operation meanwhile, the activity is retried and finds
// it unknown or settled anew.
func (a *Activities) recordResolutionOverLedger(ctx context.Context, in contract.ReconcileInput, op ledger.Operation) (contract.ReconcileResult, error) {
	res := contract.ReconcileResult{OperationID: op.ID}
	in, refusal, err := a.readBackResolution(ctx, in, op)
	switch {
	case err != nil:
		return res, err
	case refusal != "":
		return a.refuseResolution(ctx, op, refusal, false)
	}
	c, err := a.Ledger.Claim(context.WithoutCancel(ctx), ledger.ClaimRequest{Op: op, Owner: a.owner(ctx), Lease: a.lease(ctx)})
	switch {
	case err != nil:
		return res, fmt.Errorf("take operation %s back to record a person's verdict: %w", op.ID, err)
	case c.Status == ledger.AlreadySucceeded:
		return a.settled(ctx, in, c.Op)
	case c.Status != ledger.Claimed:
		return res, a.inProgress(op.ID, c.Op)
	}
	return a.recordResolution(ctx, in, c.Op)
}

// recordVerdict writes res's verdict under the reconciler's fence and, for a
// found tool operation, commits the tool message that tells the model.
// lookedFor is what the reconciler looked for; empty when a person decided.
func (a *Activities) recordVerdict(ctx context.Context, in contract.ReconcileInput, op ledger.Operation, res contract.ReconcileResult, note, lookedFor string) (contract.ReconcileResult, error) {
	c := ledger.Completion{ID: op.ID, Fence: op.Fence}
	var content []byte
	switch res.Verdict {
	case capstan.VerdictFound:
		res.State = capstan.OutcomeSucceeded
		var err error
		n := recoveredNote{Recovered: true, Note: note, ExternalID: res.ExternalID}
		if in.Resolution != nil {
			n.ResolvedBy = in.Resolution.ResolvedBy
		}
		if content, err = json.Marshal(n); err != nil {
			return res, fmt.Errorf("encode the recovered result of operation %s: %w", op.ID, err)
		}
		c.ExternalID, c.Result = res.ExternalID, content
	case capstan.VerdictAbsent:
		res.State, c.Error = capstan.OutcomeAbsent, res.Reason
	default:
		res.State, c.Error = capstan.OutcomeNeedsHuman, res.Reason
	}
	c.State = res.State
	// Recorded even if the activity is being cancelled: the verdict stands.
	if err := a.Ledger.Complete(context.WithoutCancel(ctx), c); err != nil {
		// ErrFenced: this attempt's lease ran out and another took the
		// operation; the retry reports what it recorded.
		return res, fmt.Errorf("record verdict %s of operation %s: %w", res.Verdict, op.ID, err)
	}
	a.Metrics.ReconcileVerdict(op.Kind, res.Verdict)
	a.Logger.InfoContext(ctx, "operation reconciled", "operation_id", op.ID, "kind", op.Kind,
		"verdict", string(res.Verdict), "state", string(res.State), "external_id", res.ExternalID,
		"asked", res.Asked, "looked_for", lookedFor, "reason", res.Reason)
	if res.Verdict == capstan.VerdictFound && in.ToolCallID != "" {
		item, err := a.recoveredMessage(ctx, in.ToolCallID, content)
		if err != nil {
			return res, err
		}
		res.Item = item
	}
	return res, nil
}

// settled reports what the ledger already knows, asking nothing. A found
// tool operation gets its tool message: the very one committed when the
// verdict was recorded, if a reconciler or a person recorded it.
func (a *Activities) settled(ctx context.Context, in contract.ReconcileInput, op ledger.Operation) (contract.ReconcileResult, error) {
	res := contract.ReconcileResult{OperationID: op.ID, State: op.State, ExternalID: op.ExternalID,
		Reason: "the ledger already records the operation as " + string(op.State)}
	if op.Error != "" {
		res.Reason += ": " + op.Error
	}
	if op.State != capstan.OutcomeSucceeded {
		res.Verdict = capstan.VerdictAbsent // ABSENT, FAILED, DECLARED: it did not take effect
		return res, nil
	}
	res.Verdict = capstan.VerdictFound
	if in.ToolCallID == "" {
		return res, nil
	}
	content := op.Result
	var prior recoveredNote
	if json.Unmarshal(op.Result, &prior) != nil || !prior.Recovered {
		n := recoveredNote{Recovered: true, Note: noteFoundInLedger, ExternalID: op.ExternalID}
		if json.Valid(op.Result) {
			n.Result = op.Result
		}
		var err error
		if content, err = json.Marshal(n); err != nil {
			return res, fmt.Errorf("encode the recovered result of operation %s: %w", op.ID, err)
		}
	}
	item, err := a.recoveredMessage(ctx, in.ToolCallID, content)
	if err != nil {
		return res, err
	}
	res.Item = item
	return res, nil
}

// recoveredMessage commits the tool message for a recovered call.
func (a *Activities) recoveredMessage(ctx context.Context, toolCallID string, content []byte) (string, error) {
	return a.putMessage(context.WithoutCancel(ctx), model.Message{Role: model.RoleTool, ToolCallID: toolCallID, Content: string(content)})
}

// handBack gives the operation up without a verdict: the lease is cleared so
// that the next attempt can take it at once. It stays unknown: UNKNOWN, or
// NEEDS_HUMAN if a person was already asked; the recorded error is kept.
// cause is returned, joined with the ledger's error if the hand-back fails.
func (a *Activities) handBack(ctx context.Context, op ledger.Operation, cause error) error {
	st := capstan.OutcomeUnknown
	if op.State == capstan.OutcomeNeedsHuman {
		st = capstan.OutcomeNeedsHuman
	}
	why := op.Error
	if why == "" {
		why = cause.Error()
	}
	err := a.Ledger.Complete(context.WithoutCancel(ctx), ledger.Completion{ID: op.ID, Fence: op.Fence, State: st, Error: why})
	if err != nil {
		return fmt.Errorf("%w; and handing operation %s back failed: %w", cause, op.ID, err)
	}
	return cause
}

// reconcileProgress is what the heartbeat reports; the loop updates it.
type reconcileProgress struct {
	mu sync.Mutex
	p  ReconcileProgress
}

func (r *reconcileProgress) set(asked int, last string) {
	r.mu.Lock()
	r.p = ReconcileProgress{Asked: asked, Last: last, LookingFor: r.p.LookingFor, AbsentBy: r.p.AbsentBy}
	r.mu.Unlock()
}

// waiting records why the current question waits, until the next set.
func (r *reconcileProgress) waiting(why string) {
	r.mu.Lock()
	r.p.Waiting = why
	r.mu.Unlock()
}

func (r *reconcileProgress) get() ReconcileProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p
}

// startReconcileHeartbeat heartbeats the progress on a ticker — a third of
// the heartbeat timeout, or 10 s without one — until stop is called, so a
// question that hangs does not look like a dead worker and a dead worker is
// noticed within the timeout. Nothing is sent as it starts: the timeout
// counts from the attempt's start, so the first tick is in time, and each
// answered question beats with its progress anyway.
func (a *Activities) startReconcileHeartbeat(ctx context.Context, progress *reconcileProgress) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	every := 10 * time.Second
	if t := activity.GetInfo(ctx).HeartbeatTimeout; t > 0 {
		every = max(t/3, 10*time.Millisecond)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx, progress.get())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// reconcileBackoff is the wait after the n-th question (from 0), drawn
// from Deps.Random.
func (a *Activities) reconcileBackoff(n int) time.Duration {
	return reconcileBackoff.Delay(n+1, 0, a.Random())
}

// resending gates a reconciler's re-send of a write of kind (a tool's
// name) through its service's write breaker, as ExecuteTool's sends are
// (toolBreaker): while it is open nothing is sent, and the re-send's
// outcome is judged as a call's (toolHealth).
func (a *Activities) resending(kind string) func() (func(error), bool) {
	return func() (func(error), bool) {
		service, _, _ := strings.Cut(kind, "_")
		permit, err := a.Breakers.Allow(breaker.Key(service + "/write"))
		if err != nil {
			return nil, false
		}
		return func(err error) { permit.Done(toolHealth(err)) }, true
	}
}
