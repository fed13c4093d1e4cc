package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/tool"
)

// This file holds what the activities ask of the circuit breakers
// (docs/design.md §7): which breaker guards a call, what a call's ending
// tells the breaker about its dependency, and the error of a call the
// breaker refused. Only a transport failure, a 5xx, a 429 or a timeout
// counts against a dependency; a 4xx shows it is up; a cancellation, a lost
// worker or a call that never left proves nothing.

// toolBreaker is the breaker a tool's calls go through: "<service>/read" for
// a read-only tool, "<service>/write" for every other, the service being
// what the tool's name starts with ("github_get_file" → github/read). A
// mutation's read before its write goes through the write breaker with it:
// it is one call of the tool. A tool that names its breaker
// (tool.Guarded: an MCP tool, mcp/<server>) goes through that one.
func toolBreaker(t tool.Tool) breaker.Key {
	if g, ok := t.(tool.Guarded); ok {
		return breaker.Key(g.Breaker())
	}
	service, _, _ := strings.Cut(t.Name(), "_")
	if t.Class() == tool.ReadOnly {
		return breaker.Key(service + "/read")
	}
	return breaker.Key(service + "/write")
}

// toolHealth judges a tool call's error for its breaker, from the verdict
// tool.Classify gives it (and, through WithVerdict, the service's own
// reading of its answers).
func toolHealth(err error) breaker.Outcome {
	switch {
	case err == nil:
		return breaker.Success
	case errors.Is(err, context.Canceled):
		return breaker.Ignored
	case errors.Is(err, tool.ErrInvalidArguments), errors.Is(err, tool.ErrUnknownTool), errors.Is(err, tool.ErrRefused):
		return breaker.Ignored // refused by the tool itself, before anything was sent
	}
	switch tool.Classify(err) {
	case tool.VerdictFailed:
		return breaker.Success // a definite refusal, a 4xx: the service answered
	case tool.VerdictCancelled:
		return breaker.Ignored
	default:
		// not_sent: the dial, DNS or TLS failed, or a rate limit (a 429, or
		// GitHub's 403 with its rate-limit marks) refused it; unknown: a
		// timeout, a reset, a 5xx, a 408, an unmarked 429.
		return breaker.Failure
	}
}

// slackHealth judges a chat.postMessage error for the slack/post breaker.
func slackHealth(err error) breaker.Outcome {
	var refused slack.SlackErrorResponse
	var limited *slack.RateLimitedError
	var status slack.StatusCodeError
	switch {
	case err == nil:
		return breaker.Success
	case errors.Is(err, context.Canceled):
		return breaker.Ignored
	case errors.As(err, &limited):
		return breaker.Failure
	case errors.As(err, &refused):
		if definiteSlackRefusals[refused.Err] {
			return breaker.Success // Slack answered: it will not post this
		}
		return breaker.Failure // internal_error, fatal_error, …: Slack is in trouble
	case errors.As(err, &status):
		if status.Code >= 500 || status.Code == http.StatusTooManyRequests || status.Code == http.StatusRequestTimeout {
			return breaker.Failure
		}
		return breaker.Success
	}
	return toolHealth(err) // transport errors: Go's network stack, as for any client
}

// modelHealth judges a model attempt's outcome for its provider's breaker.
func modelHealth(o model.Outcome) breaker.Outcome {
	switch o {
	case model.OutcomeCompleted, model.OutcomeRejected, model.OutcomeInvalid, model.OutcomeOverflow:
		return breaker.Success // the provider answered, if not as hoped
	case model.OutcomeNotSent, model.OutcomeOverloaded, model.OutcomeCutIdle, model.OutcomeCutTotal, model.OutcomeUnknown:
		return breaker.Failure // unreachable, overloaded (429, 5xx, 529), silent or cut by a timeout
	default:
		return breaker.Ignored // cancelled, worker lost: nothing about the provider
	}
}

// breakerOpen is the error of an operation the breaker kept from being
// sent: retryable, after the time left in the open period plus jitter,
// which capstan draws (Temporal's retry policy has none). The details say
// which breaker, for the journal and the workflow's current details.
func (a *Activities) breakerOpen(what string, open *breaker.OpenError) error {
	wait := backoff.AfterWait.Delay(1, open.Wait, a.Random())
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("%s: %v; trying again in %s", what, open, wait.Round(time.Millisecond)),
		contract.ErrTypeBreakerOpen, temporal.ApplicationErrorOptions{
			NextRetryDelay: wait,
			Details:        []any{contract.BreakerWait{Breaker: string(open.Key), State: string(open.State), Wait: wait}},
		})
}
