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

	kin := *in
	kin.TurnID = compactionID(ts.tid, ts.compactions)
	kin.AttemptID = attemptID(kin.TurnID, 1)
	kin.Compact = true
	summary := fmt.Sprintf("turn %d · compaction %d · %s", ts.turn, ts.compactions, modelLabel(kin.Model))
	var out contract.ModelTurnResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, modelTurnOptions(kin.Limits, summary)), contract.ActivityModelTurn, kin).Get(ctx, &out)
	switch {
	case err == nil && out.Compacted > 0:
		ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(&kin, AttemptRecord{Outcome: model.OutcomeCompleted, Phase: out.Phase, HTTPStatus: 200}))
		t.note(ctx, "%s completed: %d earlier transcript items summarized in %d characters", kin.AttemptID, out.Compacted, len(out.Text))
		in.Transcript, in.Append, in.Seed = out.Transcript, nil, nil
		return nil
	case err == nil:
		t.note(ctx, "%s: nothing left to compact; giving up", kin.AttemptID)
		return fail(FailContextOverflow, "the transcript no longer fits the model's context, and only its opening and newest exchange are left: %s", oc.Message)
	case ctx.Err() != nil:
		return err
	}
	koc, cfgErr := attemptOutcomeOf(err)
	ts.rec.Attempts = append(ts.rec.Attempts, t.attemptRecord(&kin, AttemptRecord{Outcome: koc.Outcome, Phase: koc.Phase, HTTPStatus: koc.HTTPStatus, Message: koc.Message}))
	if cfgErr != "" {
		return fail(FailWorkerMisconfigured, "%s", cfgErr)
	}
	t.note(ctx, "%s abandoned (%s): %s; truncating the transcript instead, behind a visible marker", kin.AttemptID, koc.Outcome, koc.Message)

	var cut contract.TruncateResult
	topts := kindTruncate.options(fmt.Sprintf("turn %d · truncation %d", ts.turn, ts.compactions), kin.Limits, false)
	err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, topts), contract.ActivityTruncateTranscript, contract.TruncateInput{
		TaskID: in.TaskID, TurnID: kin.TurnID, Transcript: in.Transcript, Append: in.Append, Seed: in.Seed,
	}).Get(ctx, &cut)
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
