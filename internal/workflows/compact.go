package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// maxCompactions bounds the compaction rounds of one turn: a transcript that
// still overflows after them fails the turn context_overflow.
const maxCompactions = 3

// compact answers an attempt that overflowed the model's context (since
// changeFullTurnGuard): the oldest transcript items are summarized by
// the model — one model call, with its own turn id (<turn>/k<round>) and
// attempt id, under the same breaker and watchdogs as any attempt — and
// when that call fails they are removed instead, behind a visible marker
// item. Either way the new transcript is committed like any other, in's
// transcript becomes it, and the turn is tried again. Compaction keeps the
// task's opening and its newest exchange whole (the activity's compactionSpan),
// so a tool result the model has not read yet is never summarized away.
func (t *task) compact(ctx workflow.Context, ts *turnState, in *contract.ModelTurnInput, oc attemptOutcome) error {
	ts.compactions++
	if ts.compactions > maxCompactions {
		msg := fmt.Sprintf("the transcript still does not fit the model's context after %d compactions: %s", maxCompactions, oc.Message)
		t.note(ctx, "%s abandoned (overflow); giving up: %s", in.AttemptID, msg)
		return fail(FailContextOverflow, "%s", msg)
	}
	t.note(ctx, "%s abandoned (overflow): %s; compacting the transcript (round %d/%d)", in.AttemptID, oc.Message, ts.compactions, maxCompactions)

	summaryIn := *in
	summaryIn.TurnID = compactionID(ts.tid, ts.compactions)
	summaryIn.AttemptID = attemptID(summaryIn.TurnID, 1)
	summaryIn.Compact = true
	summary := fmt.Sprintf("turn %d · compaction %d · %s", ts.turn, ts.compactions, modelLabel(summaryIn.Model))
	var out contract.ModelTurnResult
	if err := t.checkBudget(ctx, summaryIn.AttemptID); err != nil {
		return err
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, modelTurnOptions(summaryIn.Limits, summary)), contract.ActivityModelTurn, summaryIn).Get(ctx, &out)
	if err == nil {
		t.spendOn(ctx, summaryIn.Model, out)
	}
	switch {
	case err == nil && out.Compacted > 0:
		ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(&summaryIn, AttemptRecord{Outcome: model.OutcomeCompleted, Phase: out.Phase, HTTPStatus: 200}))
		t.note(ctx, "%s completed: %d earlier transcript items summarized in %d characters", summaryIn.AttemptID, out.Compacted, len(out.Text))
		in.Transcript, in.Append, in.Seed = out.Transcript, nil, nil
		return nil
	case err == nil:
		t.note(ctx, "%s: nothing left to compact; giving up", summaryIn.AttemptID)
		return fail(FailContextOverflow, "the transcript no longer fits the model's context, and only its opening and newest exchange are left: %s", oc.Message)
	case ctx.Err() != nil:
		return err
	}
	summaryOutcome, cfgErr := attemptOutcomeOf(err)
	t.spend(ctx, summaryIn.Model, summaryOutcome.Usage, summaryOutcome.UsageEstimated)
	ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(&summaryIn, AttemptRecord{Outcome: summaryOutcome.Outcome, Phase: summaryOutcome.Phase, HTTPStatus: summaryOutcome.HTTPStatus, Message: summaryOutcome.Message}))
	if cfgErr != "" {
		return fail(FailWorkerMisconfigured, "%s", cfgErr)
	}
	t.note(ctx, "%s abandoned (%s): %s; truncating the transcript instead, behind a visible marker", summaryIn.AttemptID, summaryOutcome.Outcome, summaryOutcome.Message)

	cut, err := t.truncate(ctx, ts, in, summaryIn)
	if err != nil {
		return err
	}
	if cut.Removed == 0 {
		t.note(ctx, "turn %d: nothing left to truncate; giving up", ts.turn)
		return fail(FailContextOverflow, "the transcript no longer fits the model's context, and only its opening and newest exchange are left: %s", oc.Message)
	}
	t.note(ctx, "turn %d: %d earlier transcript items removed, replaced by a marker saying so", ts.turn, cut.Removed)
	in.Transcript, in.Append, in.Seed = cut.Transcript, nil, nil
	return nil
}

// truncate cuts the transcript's oldest exchanges (TruncateTranscript). A
// ledger that cannot be reached is waited out like any other activity's,
// journalled and within the worker's outage limit, in tasks started since
// changeTruncateWaitsForLedger; before it, Temporal's five attempts were
// all the outage a truncation survived.
func (t *task) truncate(ctx workflow.Context, ts *turnState, in *contract.ModelTurnInput, summaryIn contract.ModelTurnInput) (contract.TruncateResult, error) {
	var cut contract.TruncateResult
	topts := kindTruncate.options(fmt.Sprintf("turn %d · truncation %d", ts.turn, ts.compactions), summaryIn.Limits, false)
	tin := contract.TruncateInput{
		TaskID: in.TaskID, Scope: in.Scope, TurnID: summaryIn.TurnID, Transcript: in.Transcript, Append: in.Append, Seed: in.Seed,
	}
	for {
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, topts), contract.ActivityTruncateTranscript, tin).Get(ctx, &cut)
		w, open := contract.BreakerWaitOf(err)
		if !open || w.Breaker != ledgerBreaker || ctx.Err() != nil ||
			!t.since(ctx, changeTruncateWaitsForLedger) {
			return cut, err
		}
		if err := t.waitForBreaker(ctx, w.Breaker, w.Wait, w.OutageLimit, fmt.Sprintf("truncation of turn %d", ts.turn)); err != nil {
			return cut, err
		}
	}
}
