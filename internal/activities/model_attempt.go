package activities

import (
	"context"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// attempt runs one model attempt of in (model.Attempt) through the
// provider's breaker, with the activity's share of it: the heartbeats, the
// live stream, and what the breaker is told. It returns the complete output
// and how far the attempt got, or the contract.ErrTypeModelAttempt application error
// carrying report, completed with how the attempt ended.
func (a *Activities) attempt(ctx context.Context, in contract.ModelTurnInput, provider model.Provider, req model.Request, report contract.AttemptReport) (out model.Output, progress model.Progress, err error) {
	// The attempt's span, "chat MODEL": the provider's HTTP exchange is
	// its child (otelhttp), and it ends with the usage, the finish reason
	// or how the attempt failed (spans.go).
	ctx, span := a.startAttemptSpan(ctx, in, provider, req)
	defer func() { a.endAttemptSpan(span, out, progress, err) }()
	// The provider's breaker: while it is open nothing is sent, and the
	// guard waits out the time left without spending a retry budget. It is
	// keyed by the provider itself, so aliases of one endpoint ("sandbox"
	// on a --sandbox worker is openai) share one breaker.
	key := breaker.Model(provider.Name())
	permit, err := a.Breakers.Allow(key)
	if err != nil {
		var open *breaker.OpenError
		if !errors.As(err, &open) {
			return model.Output{}, model.Progress{}, err
		}
		report.Breaker = string(key)
		return model.Output{}, model.Progress{Phase: model.PhaseNotSent}, attemptFailure(ctx, report, &model.AttemptError{Outcome: model.OutcomeBreakerOpen,
			Phase: model.PhaseNotSent, RetryAfter: open.Wait, Message: open.Error(), Err: open})
	}
	defer permit.Done(breaker.Ignored) // a path that reports nothing below proves nothing
	// From here the request may reach the provider: until the attempt
	// completes with the usage the provider reports, it counts an
	// estimate, which its heartbeats carry too (a lost worker's attempt
	// counts the same).
	report.Usage, report.UsageEstimated = EstimateUsage(req), true

	// The first beat makes a running attempt known (its phase, its
	// estimate, and the stream hub a follower reads it from) firstBeatAfter
	// into the attempt, not as it starts: an attempt that ends sooner, as
	// a short turn does, costs the server no heartbeat. The heartbeat
	// timeout counts from the start and firstBeatAfter is below a third of
	// it, so a lost worker is noticed as soon as before; one lost before
	// its first beat hands the budget no estimate (docs/design.md §4.2).
	// The SDK sends a first beat synchronously, a round trip to the
	// server, so it goes on its own goroutine: the stream must not wait on
	// the server. Later beats are the SDK's to batch.
	beaten := false // the hooks run one at a time on Run's goroutine
	beat := func(p model.Progress) {
		if !beaten {
			beaten = true
			go activity.RecordHeartbeat(ctx, reportAt(report, p))
			return
		}
		activity.RecordHeartbeat(ctx, reportAt(report, p))
	}
	run := model.Attempt{
		Provider: provider,
		Request:  req,
		Limits:   in.Limits,
		Validate: a.toolCallValidator(in.Tools),
		// The provider has begun to answer: a breaker taking one call at
		// a time after a failure need not wait out the stream.
		Opened:         permit.Answered,
		Received:       func(ev model.Event) { a.publishLive(in.AttemptID, ev) },
		Heartbeat:      beat,
		FirstHeartbeat: firstBeatAfter,
	}
	out, progress, err = run.Run(ctx)
	if err != nil {
		err = attemptFailure(ctx, reportAt(report, progress), err)
		if rep, ok := contract.AttemptReportOf(err); ok {
			permit.Done(modelHealth(rep.Outcome))
		}
		return model.Output{}, progress, err
	}
	permit.Done(breaker.Success)
	return out, progress, nil
}

// firstBeatAfter is how long a model attempt runs before its first
// heartbeat (model.Attempt.FirstHeartbeat; the ticker's, a third of the
// heartbeat timeout, when that is sooner): one poll of `starter follow`
// (followPoll), so a follower learns of a running attempt's stream at most
// a poll later than it did, while a turn shorter than that — a sandbox
// turn, a short answer — sends the server no heartbeat.
const firstBeatAfter = 250 * time.Millisecond

// reportAt is r with how far its attempt got.
func reportAt(r contract.AttemptReport, p model.Progress) contract.AttemptReport {
	r.Phase = p.Phase
	r.Events, r.Chars, r.PreviewTail = p.Events, p.Chars, p.PreviewTail
	return r
}

// attemptFailure turns an attempt's ending into the application error the
// workflow's turn guard reads. It is never retried by Temporal: the guard
// decides, and says why in the journal.
//
// A failure while the worker shuts down is worker_lost, whatever the stream
// reported, so a deploy never fails a task.
func attemptFailure(ctx context.Context, r contract.AttemptReport, err error) error {
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
	if r.Phase == model.PhaseNotSent {
		// Nothing reached the provider: nothing was spent.
		r.Usage, r.UsageEstimated = model.Usage{}, false
	}
	r.HTTPStatus = ae.HTTPStatus
	r.RetryAfterMS = ae.RetryAfter.Milliseconds()
	r.Message = ae.Message
	if r.Message == "" {
		r.Message = ae.Error()
	}
	return temporal.NewApplicationErrorWithOptions(ae.Error(), contract.ErrTypeModelAttempt, temporal.ApplicationErrorOptions{
		NonRetryable: true,
		Details:      []any{r},
	})
}

// EstimateUsage is what an attempt of req counts when it did not complete
// with the usage its provider reported (docs/design.md §11.4): its input's
// characters — every message's content and tool calls' arguments, and the
// tools' specifications — divided by 4, as input tokens, rounded up.
func EstimateUsage(req model.Request) model.Usage {
	chars := 0
	for _, m := range req.Messages {
		chars += utf8.RuneCountInString(m.Content)
		for _, c := range m.ToolCalls {
			chars += utf8.RuneCountInString(c.Name) + utf8.RuneCount(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		spec, _ := json.Marshal(t) // a map of JSON values: cannot fail
		chars += utf8.RuneCount(spec)
	}
	return model.Usage{InputTokens: int64((chars + 3) / 4)}
}
