package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/tool"
)

// ModelTurn runs one attempt of one turn (model.Attempt): it streams the
// model's answer, heartbeats on a ticker whatever the stream does, and cuts
// the stream when it is idle or over its total limit. It returns only a
// complete, valid output, which it commits to the transcript; any other
// ending is a contract.ErrTypeModelAttempt application error carrying an
// contract.AttemptReport, and nothing of that attempt is committed. The attempt goes
// through the provider's breaker (model/<provider>): while it is open
// nothing is sent and the attempt ends breaker_open, with the time left as
// its RetryAfterMS.
//
// With in.Compact set, the attempt asks for a summary of the transcript's
// oldest items instead of the turn's answer (compact.go), and commits the
// transcript with those items replaced by it.
func (a *Activities) ModelTurn(ctx context.Context, in contract.ModelTurnInput) (result contract.ModelTurnResult, err error) {
	ctx = scoped(logids.With(ctx, logids.IDs{TaskID: in.TaskID, TurnID: in.TurnID, AttemptID: in.AttemptID}), in.Scope, in.TaskID)
	defer func() { a.observeModelTurn(ctx, in, result, err) }()
	defer func() { a.endLive(in.AttemptID, err) }()
	report := contract.AttemptReport{AttemptID: in.AttemptID, Phase: model.PhaseNotSent, StreamURL: a.beginLive(in.AttemptID)}
	result, err = a.modelTurn(ctx, in, &report)
	var appErr *temporal.ApplicationError
	if err != nil && !errors.As(err, &appErr) && errors.Is(err, ledger.ErrUnavailable) {
		// The turn could not be read or committed: the attempt waits for
		// the ledger like any open breaker, rather than spend the turn's
		// budget as if the model were unreachable.
		return contract.ModelTurnResult{}, a.ledgerAttemptFailure(ctx, report, err)
	}
	return result, err
}

// modelTurn is ModelTurn's attempt, report its report so far: once the
// model has answered, the report holds how far it got and what it spent,
// so an answer the ledger could not commit still counts toward the task's
// budget.
func (a *Activities) modelTurn(ctx context.Context, in contract.ModelTurnInput, report *contract.AttemptReport) (contract.ModelTurnResult, error) {
	provider, ref, err := a.modelProvider(in.Model)
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	// A turn commits once (docs/design.md §4.3): a settled turn is never
	// sampled again, so its tool calls keep their operation ids.
	if out, ok, err := a.committedTurn(ctx, in.TurnID); err != nil || ok {
		return out, err
	}
	// What the turn commits is written in one transaction, with the turn.
	var commit pendingItems
	tr, msgs, err := a.loadTranscript(ctx, in, &commit)
	if err != nil {
		return contract.ModelTurnResult{}, err // ledger trouble: let Temporal retry
	}
	offered, err := a.offered(ctx, in.Policy, &commit)
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	req := model.Request{Model: ref.Model, Messages: msgs, Tools: a.pinnedOffer(offered, in.Tools)}
	from, to := 0, 0 // of a compaction: the items the summary replaces
	if in.Compact {
		if from, to = compactionSpan(msgs); from == to {
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Phase: model.PhaseNotSent}, nil
		}
		req.Messages, req.Tools = summaryRequest(msgs[from:to]), nil
	}
	out, progress, err := a.attempt(ctx, in, provider, req, *report)
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	estimated := out.Usage == (model.Usage{})
	if estimated {
		// The provider reported no usage (it need not): the attempt
		// counts the estimate, as an abandoned one does.
		out.Usage = EstimateUsage(req)
	}
	report.Phase, report.Usage, report.UsageEstimated = progress.Phase, out.Usage, estimated
	var res contract.ModelTurnResult
	if in.Compact {
		res, err = a.commitSummary(ctx, in, &commit, tr.refs, from, to, out, progress, estimated)
	} else {
		res, err = a.commitAnswer(ctx, in, &commit, tr, out, progress, estimated)
	}
	return res, err
}

// modelProvider returns the provider of a "provider:model" string and the
// parsed reference: a WorkerConfig error when the string is malformed or
// this worker has no such provider.
func (a *Activities) modelProvider(s string) (model.Provider, model.Ref, error) {
	ref, err := model.ParseRef(s)
	if err != nil {
		return nil, ref, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, nil)
	}
	provider, ok := a.Providers[ref.Provider]
	if !ok {
		msg := fmt.Sprintf("this worker has no %s provider configured", ref.Provider)
		if key, ok := config.ProviderKeys[ref.Provider]; ok {
			msg += fmt.Sprintf(" (set %s on the workers)", key)
		}
		return nil, ref, temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeWorkerConfig, nil)
	}
	return provider, ref, nil
}

// commitAnswer commits a turn's answer: the assistant item joins the
// transcript only now, with the arguments of its tool calls, in the turn's
// one commit with the items pending (the seed messages loadTranscript held).
// Its manifest extends the one the turn loaded with the items the turn
// added: the seed, the appended tool messages, and the assistant item.
func (a *Activities) commitAnswer(ctx context.Context, in contract.ModelTurnInput, pending *pendingItems, tr transcript, out model.Output, p model.Progress, estimated bool) (contract.ModelTurnResult, error) {
	item, err := pending.message(model.Message{Role: model.RoleAssistant, Content: out.Text, ToolCalls: out.ToolCalls})
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	transcript, err := pending.extend(tr, slices.Concat(tr.refs[tr.committed:], []string{item}))
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	calls, err := a.toolCallRefs(out.ToolCalls, pending, in.Tools)
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	return a.commitTurn(ctx, in.TurnID, contract.ModelTurnResult{
		AttemptID:      in.AttemptID,
		Transcript:     transcript,
		Text:           out.Text,
		ToolCalls:      calls,
		FinishReason:   out.FinishReason,
		Usage:          out.Usage,
		UsageEstimated: estimated,
		Phase:          p.Phase,
		Events:         p.Events,
	}, pending.data)
}

// commitSummary commits a compaction: the transcript with items [from, to)
// replaced by the summary the model wrote, stored with the items pending
// (the seed messages loadTranscript held) in the turn's one commit. Its
// manifest names the whole new transcript: a fresh chain.
func (a *Activities) commitSummary(ctx context.Context, in contract.ModelTurnInput, pending *pendingItems, refs []string, from, to int, out model.Output, p model.Progress, estimated bool) (contract.ModelTurnResult, error) {
	item, err := pending.message(summaryItem(to-from, out.Text))
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	transcript, err := pending.snapshot(replaceSpan(refs, from, to, item))
	if err != nil {
		return contract.ModelTurnResult{}, err
	}
	return a.commitTurn(ctx, in.TurnID, contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: transcript, Text: out.Text,
		FinishReason: out.FinishReason, Usage: out.Usage, UsageEstimated: estimated, Phase: p.Phase, Events: p.Events, Compacted: to - from}, pending.data)
}

// committedTurn returns the recorded output of a turn that already
// committed, marked Replayed.
func (a *Activities) committedTurn(ctx context.Context, turnID string) (contract.ModelTurnResult, bool, error) {
	data, err := a.Ledger.GetTurn(ctx, turnID)
	if errors.Is(err, ledger.ErrNotFound) {
		return contract.ModelTurnResult{}, false, nil
	}
	if err != nil {
		return contract.ModelTurnResult{}, false, fmt.Errorf("look up turn %s: %w", turnID, err)
	}
	var out contract.ModelTurnResult
	if err := json.Unmarshal(data, &out); err != nil {
		return contract.ModelTurnResult{}, false, fmt.Errorf("decode committed turn %s: %w", turnID, err)
	}
	out.Replayed = true
	return out, true, nil
}

// commitTurn records out as the turn's output, and items, the transcript
// items it refers to, in the same ledger write. When another attempt of the
// same turn committed first (a zombie that finished late), its output is
// the turn's and is returned instead, so the workflow never sees two
// versions of one turn.
func (a *Activities) commitTurn(ctx context.Context, turnID string, out contract.ModelTurnResult, items [][]byte) (contract.ModelTurnResult, error) {
	data, err := json.Marshal(out)
	if err != nil {
		return contract.ModelTurnResult{}, fmt.Errorf("encode turn %s: %w", turnID, err)
	}
	stored, err := a.Ledger.CommitTurn(context.WithoutCancel(ctx), turnID, data, items...)
	if err != nil {
		return contract.ModelTurnResult{}, fmt.Errorf("commit turn %s: %w", turnID, err)
	}
	if bytes.Equal(stored, data) {
		return out, nil
	}
	var first contract.ModelTurnResult
	if err := json.Unmarshal(stored, &first); err != nil {
		return contract.ModelTurnResult{}, fmt.Errorf("decode committed turn %s: %w", turnID, err)
	}
	first.Replayed = true
	return first, nil
}

// toolCallRefs names each committed call for the workflow: its identity
// (validated by Finish already) and a reference to its arguments, which
// are held in pending to be stored with the turn's commit.
func (a *Activities) toolCallRefs(calls []model.ToolCall, pending *pendingItems, set *contract.ToolSet) ([]contract.ToolCallRef, error) {
	refs := make([]contract.ToolCallRef, 0, len(calls))
	for _, c := range calls {
		t, err := a.Tools.Get(c.Name)
		if err != nil {
			return nil, err
		}
		var id tool.Identity
		if !drifted(t, set) { // a drifted call is refused by ExecuteTool
			if id, err = t.Identify(c.Arguments); err != nil {
				return nil, err
			}
		}
		args := pending.add(c.Arguments)
		refs = append(refs, contract.ToolCallRef{ID: c.ID, Name: c.Name, Class: string(t.Class()),
			BusinessKey: id.BusinessKey, Arguments: args, Summary: t.Summary(c.Arguments), SchemaHash: callSchemaHash(t, set)})
	}
	return refs, nil
}

// toolCallValidator accepts a tool call only for a registered tool with
// arguments its schema accepts, so a malformed call never reaches
// ExecuteTool — except a call of a tool that drifted from the task's fixed
// set (drifted): that one is committed as made, and ExecuteTool refuses it
// with a message the model reads, rather than the attempt failing as
// invalid.
func (a *Activities) toolCallValidator(set *contract.ToolSet) func(string, json.RawMessage) error {
	return func(name string, args json.RawMessage) error {
		t, err := a.Tools.Get(name)
		if err != nil {
			return err
		}
		if drifted(t, set) {
			return nil
		}
		_, err = t.Identify(args)
		return err
	}
}
