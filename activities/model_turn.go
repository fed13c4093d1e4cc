package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
)

// ModelTurn runs one attempt of one turn: it streams the model's answer,
// heartbeats on a ticker whatever the stream does, and cuts the stream when
// it is idle or over its total limit. It returns only a complete, valid
// output, which it commits to the transcript; any other ending is an
// ErrTypeModelAttempt application error carrying an AttemptReport, and nothing of
// that attempt is committed. The attempt goes through the provider's breaker
// (model/<provider>): while it is open nothing is sent and the attempt ends
// breaker_open, with the time left as its RetryAfterMS.
//
// With in.Compact set, the attempt asks for a summary of the transcript's
// oldest items instead of the turn's answer (compact.go), and commits the
// transcript with those items replaced by it.
func (a *Activities) ModelTurn(ctx context.Context, in ModelTurnInput) (result ModelTurnResult, err error) {
	ctx = logids.With(ctx, logids.IDs{TaskID: in.TaskID, TurnID: in.TurnID, AttemptID: in.AttemptID})
	defer func() { a.observeModelTurn(ctx, in, result, err) }()
	defer func() { a.endLive(in.AttemptID, err) }()
	report := AttemptReport{AttemptID: in.AttemptID, Phase: model.PhaseNotSent, StreamURL: a.beginLive(in.AttemptID)}
	ref, err := model.ParseRef(in.Model)
	if err != nil {
		return ModelTurnResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeWorkerConfig, nil)
	}
	provider, ok := a.Providers[ref.Provider]
	if !ok {
		msg := fmt.Sprintf("this worker has no %s provider configured", ref.Provider)
		if key, ok := config.ProviderKeys[ref.Provider]; ok {
			msg += fmt.Sprintf(" (set %s on the workers)", key)
		}
		return ModelTurnResult{}, temporal.NewNonRetryableApplicationError(msg, ErrTypeWorkerConfig, nil)
	}
	// A turn commits once (docs/design.md §4.3): a settled turn is never
	// sampled again, so its tool calls keep their operation ids.
	if out, ok, err := a.committedTurn(ctx, in.TurnID); err != nil || ok {
		return out, err
	}
	// What the turn commits is written in one transaction, with the turn.
	var commit pendingItems
	refs, msgs, err := a.loadTranscript(ctx, in, &commit)
	if err != nil {
		return ModelTurnResult{}, err // ledger trouble: let Temporal retry
	}
	reqMsgs, reqTools := msgs, a.Tools.Specs()
	from, to := 0, 0 // of a compaction: the items the summary replaces
	if in.Compact {
		if from, to = compactionSpan(msgs); from == to {
			return ModelTurnResult{AttemptID: in.AttemptID, Phase: model.PhaseNotSent}, nil
		}
		reqMsgs, reqTools = summaryRequest(msgs[from:to]), nil
	}

	// The provider's breaker: while it is open nothing is sent, and the
	// guard waits out the time left without spending a retry budget. It is
	// keyed by the provider itself, so aliases of one endpoint ("sandbox"
	// on a --sandbox worker is openai) share one breaker.
	key := breaker.Model(provider.Name())
	permit, err := a.Breakers.Allow(key)
	if err != nil {
		var open *breaker.OpenError
		if !errors.As(err, &open) {
			return ModelTurnResult{}, err
		}
		report.Breaker = string(key)
		return ModelTurnResult{}, attemptFailure(ctx, report, &model.AttemptError{Outcome: model.OutcomeBreakerOpen,
			Phase: model.PhaseNotSent, RetryAfter: open.Wait, Message: open.Error(), Err: open})
	}
	defer permit.Done(breaker.Ignored) // a path that reports nothing below proves nothing
	// failed ends the attempt and tells the breaker what it showed.
	failed := func(r AttemptReport, err error) error {
		err = attemptFailure(ctx, r, err)
		if rep, ok := AttemptReportOf(err); ok {
			permit.Done(modelHealth(rep.Outcome))
		}
		return err
	}

	limits := in.Limits.WithDefaults()
	attemptCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The watchdogs start before the request is sent: a server that takes
	// the request and never answers is cut like a silent stream. The
	// goroutine owns the stream; the loop below only reads its phase.
	var acc model.Accumulator
	// transport records how far the request got, written by the provider's
	// transport hooks; read here before the stream opens.
	var transport model.PhaseRecorder
	opened := make(chan model.Stream, 1)
	events := make(chan model.Event)
	done := make(chan error, 1)
	go func() {
		stream, err := provider.Stream(attemptCtx, model.Request{Model: ref.Model, Messages: reqMsgs, Tools: reqTools, Recorder: &transport})
		if err != nil {
			done <- err
			return
		}
		defer stream.Close()
		opened <- stream
		for {
			ev, err := stream.Recv()
			if err != nil {
				done <- err
				return
			}
			select {
			case events <- ev:
			case <-attemptCtx.Done():
				done <- context.Cause(attemptCtx)
				return
			}
		}
	}()

	var stream model.Stream
	phase := func() model.Phase {
		if stream == nil {
			return transport.Phase() // before the headers: NOT_SENT or SENT_NO_HEADERS
		}
		return stream.Phase()
	}
	heartbeat := time.NewTicker(limits.HeartbeatInterval())
	defer heartbeat.Stop()
	idle := time.NewTimer(limits.FirstEvent)
	defer idle.Stop()
	total := time.NewTimer(limits.Total)
	defer total.Stop()
	snapshot := func() AttemptReport {
		r := report
		r.Phase = phase()
		r.Events, r.Chars, r.PreviewTail = acc.Events(), acc.Chars(), acc.PreviewTail(80)
		return r
	}
	// The first beat makes the attempt known at once (its phase, and the
	// stream hub a follower reads it from). The SDK sends a first beat
	// synchronously, a round trip to the server, so it goes on its own
	// goroutine: the request is already under way, and its first events
	// must not wait on the server. Later beats are the SDK's to batch.
	first := snapshot()
	go activity.RecordHeartbeat(ctx, first)

	var streamErr error
loop:
	for {
		select {
		case stream = <-opened:
			// The provider has begun to answer: a breaker taking one call
			// at a time after a failure need not wait out the stream.
			permit.Answered()
		case ev := <-events:
			acc.Add(ev)
			a.publishLive(in.AttemptID, ev)
			idle.Reset(limits.Idle)
		case streamErr = <-done:
			break loop
		case <-heartbeat.C:
			activity.RecordHeartbeat(ctx, snapshot())
		case <-idle.C:
			cut := &model.AttemptError{Outcome: model.OutcomeCutIdle, Phase: phase(),
				Message: fmt.Sprintf("the stream was silent for %s", idleFor(acc.Events(), limits))}
			cancel(cut)
			return ModelTurnResult{}, failed(snapshot(), cut)
		case <-total.C:
			cut := &model.AttemptError{Outcome: model.OutcomeCutTotal, Phase: phase(),
				Message: fmt.Sprintf("the attempt ran past its total limit of %s", limits.Total)}
			cancel(cut)
			return ModelTurnResult{}, failed(snapshot(), cut)
		case <-ctx.Done():
			cancel(ctx.Err())
			return ModelTurnResult{}, failed(snapshot(), &model.AttemptError{
				Outcome: model.OutcomeCancelled, Phase: phase(), Message: "the attempt was cancelled", Err: ctx.Err()})
		}
	}
	select { // the stream may have opened and ended between two selects
	case stream = <-opened:
	default:
	}
	if !errors.Is(streamErr, io.EOF) {
		return ModelTurnResult{}, failed(snapshot(), streamErr)
	}
	out, err := acc.Finish(a.validateToolCall)
	if err != nil {
		return ModelTurnResult{}, failed(snapshot(), err)
	}
	permit.Done(breaker.Success)
	if in.Compact {
		return a.commitSummary(ctx, in, &commit, refs, from, to, out, phase(), acc.Events())
	}

	// Commit: the assistant item joins the transcript only now.
	item, err := commit.message(model.Message{Role: model.RoleAssistant, Content: out.Text, ToolCalls: out.ToolCalls})
	if err != nil {
		return ModelTurnResult{}, err
	}
	transcript, err := commit.manifest(append(refs, item))
	if err != nil {
		return ModelTurnResult{}, err
	}
	calls, err := a.toolCallRefs(out.ToolCalls, &commit)
	if err != nil {
		return ModelTurnResult{}, err
	}
	return a.commitTurn(ctx, in.TurnID, ModelTurnResult{
		AttemptID:    in.AttemptID,
		Transcript:   transcript,
		Text:         out.Text,
		ToolCalls:    calls,
		FinishReason: out.FinishReason,
		Usage:        out.Usage,
		Phase:        phase(),
		Events:       acc.Events(),
	}, commit.data)
}

// commitSummary commits a compaction: the transcript with items [from, to)
// replaced by the summary the model wrote, stored with the items pending
// (the seed messages loadTranscript held) in the turn's one commit.
func (a *Activities) commitSummary(ctx context.Context, in ModelTurnInput, pending *pendingItems, refs []string, from, to int, out model.Output, phase model.Phase, events int) (ModelTurnResult, error) {
	item, err := pending.message(summaryItem(to-from, out.Text))
	if err != nil {
		return ModelTurnResult{}, err
	}
	transcript, err := pending.manifest(replaceSpan(refs, from, to, item))
	if err != nil {
		return ModelTurnResult{}, err
	}
	return a.commitTurn(ctx, in.TurnID, ModelTurnResult{AttemptID: in.AttemptID, Transcript: transcript, Text: out.Text,
		FinishReason: out.FinishReason, Usage: out.Usage, Phase: phase, Events: events, Compacted: to - from}, pending.data)
}

// committedTurn returns the recorded output of a turn that already
// committed, marked Replayed.
func (a *Activities) committedTurn(ctx context.Context, turnID string) (ModelTurnResult, bool, error) {
	data, err := a.Ledger.GetTurn(ctx, turnID)
	if errors.Is(err, ledger.ErrNotFound) {
		return ModelTurnResult{}, false, nil
	}
	if err != nil {
		return ModelTurnResult{}, false, fmt.Errorf("look up turn %s: %w", turnID, err)
	}
	var out ModelTurnResult
	if err := json.Unmarshal(data, &out); err != nil {
		return ModelTurnResult{}, false, fmt.Errorf("decode committed turn %s: %w", turnID, err)
	}
	out.Replayed = true
	return out, true, nil
}

// commitTurn records out as the turn's output, and items, the transcript
// items it refers to, in the same ledger write. When another attempt of the
// same turn committed first (a zombie that finished late), its output is
// the turn's and is returned instead, so the workflow never sees two
// versions of one turn.
func (a *Activities) commitTurn(ctx context.Context, turnID string, out ModelTurnResult, items [][]byte) (ModelTurnResult, error) {
	data, err := json.Marshal(out)
	if err != nil {
		return ModelTurnResult{}, fmt.Errorf("encode turn %s: %w", turnID, err)
	}
	stored, err := a.Ledger.CommitTurn(context.WithoutCancel(ctx), turnID, data, items...)
	if err != nil {
		return ModelTurnResult{}, fmt.Errorf("commit turn %s: %w", turnID, err)
	}
	if bytes.Equal(stored, data) {
		return out, nil
	}
	var first ModelTurnResult
	if err := json.Unmarshal(stored, &first); err != nil {
		return ModelTurnResult{}, fmt.Errorf("decode committed turn %s: %w", turnID, err)
	}
	first.Replayed = true
	return first, nil
}

func idleFor(events int, l model.Limits) time.Duration {
	if events == 0 {
		return l.FirstEvent
	}
	return l.Idle
}

// toolCallRefs names each committed call for the workflow: its identity
// (validated by Finish already) and a reference to its arguments, which
// are held in pending to be stored with the turn's commit.
func (a *Activities) toolCallRefs(calls []model.ToolCall, pending *pendingItems) ([]ToolCallRef, error) {
	refs := make([]ToolCallRef, 0, len(calls))
	for _, c := range calls {
		t, err := a.Tools.Get(c.Name)
		if err != nil {
			return nil, err
		}
		id, err := t.Identify(c.Arguments)
		if err != nil {
			return nil, err
		}
		args := pending.add(c.Arguments)
		refs = append(refs, ToolCallRef{ID: c.ID, Name: c.Name, Class: string(t.Class()),
			BusinessKey: id.BusinessKey, Arguments: args, Summary: t.Summary(c.Arguments)})
	}
	return refs, nil
}

// validateToolCall accepts a tool call only for a registered tool with
// arguments its schema accepts, so a malformed call never reaches ExecuteTool.
func (a *Activities) validateToolCall(name string, args json.RawMessage) error {
	t, err := a.Tools.Get(name)
	if err != nil {
		return err
	}
	_, err = t.Identify(args)
	return err
}

// attemptFailure turns an attempt's ending into the application error the
// workflow's turn guard reads. It is never retried by Temporal: the guard
// decides, and says why in the journal.
//
// A failure while the worker shuts down is worker_lost, whatever the stream
// reported, so a deploy never fails a task.
func attemptFailure(ctx context.Context, r AttemptReport, err error) error {
	var ae *model.AttemptError
	if !errors.As(err, &ae) {
		ae = &model.AttemptError{Outcome: model.OutcomeUnknown, Phase: r.Phase, Message: err.Error(), Err: err}
	}
	if errors.Is(context.Cause(ctx), worker.ErrWorkerShutdown) {
		// The worker is stopping, not the task: another worker takes the
		// turn again at once.
		ae = &model.AttemptError{Outcome: model.OutcomeWorkerLost, Phase: ae.Phase, Message: "the worker shut down during the attempt", Err: err}
	}
	r.Outcome = ae.Outcome
	if ae.Phase != "" {
		r.Phase = ae.Phase
	}
	r.HTTPStatus = ae.HTTPStatus
	r.RetryAfterMS = ae.RetryAfter.Milliseconds()
	r.Message = ae.Message
	if r.Message == "" {
		r.Message = ae.Error()
	}
	return temporal.NewApplicationErrorWithOptions(ae.Error(), ErrTypeModelAttempt, temporal.ApplicationErrorOptions{
		NonRetryable: true,
		Details:      []any{r},
	})
}
