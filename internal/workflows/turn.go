package workflows

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// This file holds one model turn (docs/design.md §4.4): its attempts under
// the turn guard, the switch to a fallback model, and the continuation of a
// final answer cut by the output token limit. Compaction is in compact.go.

// Limits of a turn, since changeFullTurnGuard.
const (
	// maxContinuations: a final answer cut by the output token limit is
	// continued at most this often; still cut, the turn fails
	// model_output_truncated rather than deliver half an answer.
	maxContinuations = 2
	// journalEvery: a wait longer than this is slept in slices of it, each
	// ending with a journal line, so a person or `starter follow` watching
	// a long wait always sees it is alive.
	journalEvery = 30 * time.Second
)

// finishLength is the finish reason of an answer cut by the output token
// limit; every provider maps its own (OpenAI "length", Anthropic
// "max_tokens") to it.
const finishLength = "length"

// continuePrompt asks for the rest of an answer the token limit cut.
const continuePrompt = "Your previous answer was cut off by the output token limit. " +
	"Continue it exactly where it stopped, without repeating anything already written."

// turnState is what one turn knows of itself while it runs its model calls:
// the answer, its continuations and its compactions share one guard, so the
// per-turn budgets are per turn, whichever call spends them.
type turnState struct {
	turn          int
	tid           string
	rec           *TurnRecord
	guard         turnGuard
	switchedModel bool // the turn switched to a fallback model already
	compactions   int
}

// runTurn runs one turn: its answer under the turn guard and, since
// changeFullTurnGuard, the continuations of an answer the token limit
// cut.
func (t *task) runTurn(ctx workflow.Context, turn int) (contract.ModelTurnResult, error) {
	tid := turnID(t.in.TaskID, t.scope, turn)
	t.result.Turns = append(t.result.Turns, TurnRecord{TurnID: tid, Attempts: []AttemptRecord{}})
	ts := &turnState{turn: turn, tid: tid, rec: &t.result.Turns[len(t.result.Turns)-1]}
	ts.guard.persistent = t.fullTurnGuard && t.in.Persistent
	in := contract.ModelTurnInput{TaskID: t.in.TaskID, Scope: t.scope, TurnID: tid, Model: t.model(),
		Limits: t.in.ModelLimits.WithDefaults(), Transcript: t.transcript, Append: t.append, Policy: t.toolPolicy(),
		Tools: t.in.Tools}
	if t.transcript == "" {
		in.Seed, in.Policy = t.seed(), t.firstTurnPolicy()
	}
	out, err := t.callModel(ctx, ts, &in, "")
	if err != nil || !t.fullTurnGuard {
		return out, err
	}
	return t.continueCutAnswer(ctx, ts, in, out)
}

// model is the provider:model the task is on.
func (t *task) model() string {
	if t.modelIndex == 0 || t.modelIndex > len(t.in.Fallbacks) {
		return t.in.Model
	}
	return t.in.Fallbacks[t.modelIndex-1]
}

// continueCutAnswer asks the model to go on with a final answer that the
// output token limit cut, at most maxContinuations times, and returns the
// whole answer. A tool call cut the same way never gets here: the activity
// reports it invalid, and the guard retries it. Each continuation is a
// model call of its own (turn id <turn>/c<k>, so it commits once and a
// reset replays it), seeing the committed cut answer and a request to go
// on; the answer's parts are joined in order.
func (t *task) continueCutAnswer(ctx workflow.Context, ts *turnState, in contract.ModelTurnInput, out contract.ModelTurnResult) (contract.ModelTurnResult, error) {
	text := out.Text
	k := 0
	for len(out.ToolCalls) == 0 && out.FinishReason == finishLength {
		k++
		if k > maxContinuations {
			t.note(ctx, "turn %d: the answer is still cut by the output token limit after %d continuations (%d characters); failing rather than delivering it incomplete",
				ts.turn, maxContinuations, len(text))
			return out, fail(FailModelOutputTruncated,
				"the model's final answer was cut by its output token limit %d times (%d characters written); capstan does not deliver an incomplete answer",
				k, len(text))
		}
		t.note(ctx, "turn %d: %s's answer was cut by the output token limit after %d characters; asking the model to continue it (continuation %d/%d)",
			ts.turn, out.AttemptID, len(out.Text), k, maxContinuations)
		continuationIn := in
		continuationIn.TurnID = continuationID(ts.tid, k)
		continuationIn.Transcript, continuationIn.Append = out.Transcript, nil
		continuationIn.Seed = []model.Message{{Role: model.RoleUser, Content: continuePrompt}}
		next, err := t.callModel(ctx, ts, &continuationIn, fmt.Sprintf("continuation %d", k))
		if err != nil {
			return next, err
		}
		text += next.Text
		out = next
	}
	if k > 0 {
		t.note(ctx, "turn %d: the answer is complete after %d continuation(s) (%d characters)", ts.turn, k, len(text))
	}
	out.Text = text
	return out, nil
}

// callModel runs attempts of one model call of a turn (its answer, or a
// continuation) under the turn guard until one completes or the guard gives
// up. kind names the call in the activity summary; empty for the answer.
func (t *task) callModel(ctx workflow.Context, ts *turnState, in *contract.ModelTurnInput, kind string) (contract.ModelTurnResult, error) {
	for attempt := 1; ; attempt++ {
		in.AttemptID = attemptID(in.TurnID, attempt)
		in.Model = t.model()
		summary := fmt.Sprintf("turn %d · attempt %d · %s", ts.turn, attempt, modelLabel(in.Model))
		if kind != "" {
			summary = fmt.Sprintf("turn %d · %s · attempt %d · %s", ts.turn, kind, attempt, modelLabel(in.Model))
		}
		var out contract.ModelTurnResult
		if err := t.checkBudget(ctx, in.AttemptID); err != nil {
			return out, err
		}
		actx := workflow.WithActivityOptions(ctx, modelTurnOptions(in.Limits, summary))
		err := workflow.ExecuteActivity(actx, contract.ActivityModelTurn, *in).Get(ctx, &out)
		if err == nil {
			t.spendOn(ctx, in.Model, out)
			t.ledgerBack()
			ts.guard.completed()
			ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(in, AttemptRecord{Outcome: model.OutcomeCompleted, Phase: out.Phase, HTTPStatus: 200}))
			t.note(ctx, "%s completed: %d tool call(s), %d characters", in.AttemptID, len(out.ToolCalls), len(out.Text))
			return out, nil
		}
		if ctx.Err() != nil {
			ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(in, AttemptRecord{Outcome: model.OutcomeCancelled, Phase: model.PhaseUnknown}))
			return out, err
		}
		oc, cfgErr := attemptOutcomeOf(err)
		t.spend(ctx, in.Model, oc.Usage, oc.UsageEstimated)
		ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(in, AttemptRecord{Outcome: oc.Outcome, Phase: oc.Phase, HTTPStatus: oc.HTTPStatus, Message: oc.Message}))
		if cfgErr != "" {
			return out, fail(FailWorkerMisconfigured, "%s", cfgErr)
		}
		if t.fullTurnGuard && oc.Outcome == model.OutcomeOverflow {
			if err := t.compact(ctx, ts, in, oc); err != nil {
				return out, err
			}
			continue
		}
		if oc.Outcome == model.OutcomeBreakerOpen {
			ts.guard.breakerWaits = t.waitsOnBreakers(ctx)
		}
		oc.At = workflow.Now(ctx)
		var sideEffectErr error
		d := ts.guard.decide(oc, func() float64 {
			var j float64
			sideEffectErr = workflow.SideEffect(ctx, func(workflow.Context) any { return rand.Float64() }).Get(&j)
			return j
		})
		if sideEffectErr != nil {
			return out, sideEffectErr
		}
		if !d.Retry {
			if t.fullTurnGuard && d.Fallback && t.switchModel(ctx, ts, in.AttemptID, oc, d) {
				continue
			}
			t.note(ctx, "%s abandoned (%s); giving up: %s", in.AttemptID, oc.Outcome, d.Message)
			return out, fail(d.Code, "%s", d.Message)
		}
		if d.BreakerWait {
			if err := t.waitForBreaker(ctx, oc.Breaker, d.Delay, oc.OutageLimit, "model attempt "+in.AttemptID); err != nil {
				return out, err
			}
			continue
		}
		t.note(ctx, "%s abandoned (%s); retrying in %s: %s", in.AttemptID, oc.Outcome, roundWait(d.Delay), d.Message)
		if err := t.wait(ctx, d.Delay, fmt.Sprintf("turn %d's next attempt (%s)", ts.turn, oc.Outcome)); err != nil {
			return out, err
		}
	}
}

// spendOn adds a completed attempt's usage to the task's spend; a replayed
// turn (committed by an earlier attempt) sent nothing now.
func (t *task) spendOn(ctx workflow.Context, m string, out contract.ModelTurnResult) {
	if !out.Replayed {
		t.spend(ctx, m, out.Usage, out.UsageEstimated)
	}
}

// attemptRecord completes r with in's attempt id and, since
// changeFullTurnGuard, the model it asked.
func (t *task) attemptRecord(in *contract.ModelTurnInput, r AttemptRecord) AttemptRecord {
	r.AttemptID = in.AttemptID
	if t.fullTurnGuard {
		r.Model = in.Model
	}
	return r
}

// switchModel moves the task to its next fallback model when the guard gave
// up on an outcome another model may not share (an overload budget spent, a
// total cut), once per turn. The new model starts with fresh budgets; the
// task stays on it for its later turns, because the model it left has just
// spent a whole budget failing and would most likely cost every later turn
// the same. It reports whether it switched.
func (t *task) switchModel(ctx workflow.Context, ts *turnState, attemptID string, oc attemptOutcome, d decision) bool {
	if ts.switchedModel || t.modelIndex >= len(t.in.Fallbacks) {
		return false
	}
	from := t.model()
	t.modelIndex++
	ts.switchedModel = true
	ts.guard = turnGuard{breakerWaits: ts.guard.breakerWaits, persistent: ts.guard.persistent}
	t.note(ctx, "%s abandoned (%s): %s; switching turn %d from %s to fallback model %s, which the task keeps",
		attemptID, oc.Outcome, d.Message, ts.turn, from, t.model())
	return true
}

// wait sleeps d before the next attempt. Since changeFullTurnGuard a
// wait longer than journalEvery is shown in the task's status while it
// lasts, and journalled every journalEvery (sleep).
func (t *task) wait(ctx workflow.Context, d time.Duration, what string) error {
	if d <= 0 {
		return nil
	}
	if t.fullTurnGuard && d > journalEvery {
		until := workflow.Now(ctx).Add(d)
		t.result.Waiting = fmt.Sprintf("waiting %s for %s (until %s)", roundWait(d), what, until.UTC().Format("15:04:05 MST"))
		defer func() { t.result.Waiting = "" }()
	}
	return t.sleep(ctx, d, what)
}

// sleep is a durable timer of d. Since changeFullTurnGuard a sleep
// longer than journalEvery is slept in slices of it, each followed by a
// journal line saying how long is left, so a person or a follower watching
// a long wait always sees the task is alive.
func (t *task) sleep(ctx workflow.Context, d time.Duration, what string) error {
	if !t.fullTurnGuard || d <= journalEvery {
		return workflow.Sleep(ctx, d)
	}
	until := workflow.Now(ctx).Add(d)
	for left := d; left > 0; {
		step := min(left, journalEvery)
		if err := workflow.Sleep(ctx, step); err != nil {
			return err
		}
		if left -= step; left > 0 {
			t.note(ctx, "still waiting %s for %s (until %s)", roundWait(left), what, until.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// continuationID and compactionID name the extra model calls of a turn, as
// the ledger commits them: each commits once, so a reset replays it.
func continuationID(turnID string, k int) string { return fmt.Sprintf("%s/c%d", turnID, k) }
func compactionID(turnID string, k int) string   { return fmt.Sprintf("%s/k%d", turnID, k) }

// attemptOutcomeOf reads how a failed ModelTurn ended. The second result is
// set when the worker lacks configuration, which no retry fixes.
func attemptOutcomeOf(err error) (attemptOutcome, string) {
	var timeoutErr *temporal.TimeoutError
	if r, ok := contract.AttemptReportOf(err); ok {
		return attemptOutcome{Outcome: r.Outcome, Phase: r.Phase, HTTPStatus: r.HTTPStatus,
			RetryAfter: time.Duration(r.RetryAfterMS) * time.Millisecond, Message: r.Message, Breaker: r.Breaker,
			OutageLimit: time.Duration(r.OutageLimitMS) * time.Millisecond, Usage: r.Usage, UsageEstimated: r.UsageEstimated}, ""
	}
	switch {
	case contract.IsWorkerConfig(err):
		msg := contract.Describe(err)
		return attemptOutcome{Outcome: model.OutcomeRejected, Phase: model.PhaseNotSent, Message: msg}, msg
	case errors.As(err, &timeoutErr):
		oc := attemptOutcome{Outcome: model.OutcomeWorkerLost, Phase: model.PhaseUnknown,
			Message: fmt.Sprintf("the worker stopped answering (%s timeout)", timeoutErr.TimeoutType())}
		// The lost attempt's last heartbeat carries its estimate, once its
		// request may have been sent.
		var beat contract.AttemptReport
		if timeoutErr.HasLastHeartbeatDetails() && timeoutErr.LastHeartbeatDetails(&beat) == nil {
			oc.Usage, oc.UsageEstimated = beat.Usage, beat.UsageEstimated
		}
		return oc, ""
	default:
		return attemptOutcome{Outcome: model.OutcomeUnknown, Phase: model.PhaseUnknown, Message: err.Error()}, ""
	}
}

func modelLabel(m string) string {
	if ref, err := model.ParseRef(m); err == nil {
		return ref.Provider + "/" + ref.Model
	}
	return m
}
