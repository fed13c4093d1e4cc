package workflows

import (
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/model"
)

// Per-turn retry budgets of the turn guard (docs/design.md §4.4).
const (
	budgetTransport = 4
	budgetOverload  = 5
	budgetIdle      = 1
	budgetInvalid   = 2
	// maxRetryAfter: a provider asking for a longer wait fails the turn
	// (in persistent mode, the wait is capped at it instead).
	maxRetryAfter = 5 * time.Minute
	// persistentOverloadFor: in persistent mode, overload retries go on
	// this long after the turn's first overload.
	persistentOverloadFor = 6 * time.Hour
)

// The guard's backoffs: full jitter over a span doubling from the base to
// the cap (backoff.Policy.Delay with no floor; the draw is a SideEffect).
var (
	transportBackoff = backoff.Policy{Base: 500 * time.Millisecond, Cap: 10 * time.Second}
	overloadBackoff  = backoff.Policy{Base: 2 * time.Second, Cap: 30 * time.Second}
	// persistentBackoff: each wait of persistent mode is capped at
	// maxRetryAfter.
	persistentBackoff = backoff.Policy{Base: 2 * time.Second, Cap: maxRetryAfter}
)

// turnGuard decides, for one turn, whether a failed attempt is tried again.
// Its state is plain data, so the decision replays deterministically; jitter
// is passed in from a SideEffect.
type turnGuard struct {
	transport, overload, idle, invalid int
	// breakerWaits: breaker_open is waited out
	// (changeWorkflowWaitsOutBreakers); set by the workflow when such an
	// attempt first comes back.
	breakerWaits bool
	// persistent: overloads are retried for persistentOverloadFor rather
	// than budgetOverload attempts (AgentTaskInput.Persistent, since
	// changeFullTurnGuard). overloadSince is the turn's first
	// overload.
	persistent    bool
	overloadSince time.Time
}

// decision is the guard's verdict on one attempt.
type decision struct {
	Retry   bool
	Delay   time.Duration
	Code    FailureCode // failure code when not retrying
	Message string      // the readable reason, for the journal and the task
	// BreakerWait: nothing was sent because the provider's breaker is
	// open; Delay is the time left plus jitter, and no budget was spent.
	BreakerWait bool
	// Fallback: the turn fails on something another model may not share
	// (the provider stayed overloaded, the attempt ran past its total
	// limit), so a fallback model may take the turn over.
	Fallback bool
}

// decide calls jitter (a workflow.SideEffect in the workflow) only when it
// chooses a jittered delay, so history records randomness only where used.
func (g *turnGuard) decide(r attemptOutcome, jitter func() float64) decision {
	switch r.Outcome {
	case model.OutcomeNotSent, model.OutcomeUnknown, model.OutcomeWorkerLost, model.OutcomeCancelled:
		// cancelled reaches the guard only when the task itself was not
		// cancelled: the attempt's worker went away under it.
		// The model call has no side effect: a request lost in transit or a
		// lost worker is simply asked again, within the transport budget.
		g.transport++
		if g.transport > budgetTransport {
			code := FailProviderUnavailable
			if lostWorker(r.Outcome) {
				code = FailWorkerLost
			}
			return decision{Code: code, Message: fmt.Sprintf("the model could not be reached after %d attempts: %s", g.transport, r.Message)}
		}
		var delay time.Duration // a lost worker's turn is taken up again at once
		if !lostWorker(r.Outcome) {
			delay = transportBackoff.Delay(g.transport, 0, jitter())
		}
		return decision{Retry: true, Delay: delay, Message: fmt.Sprintf("%s (transport %d/%d)", r.Message, g.transport, budgetTransport)}
	case model.OutcomeOverloaded:
		g.overload++
		if g.persistent {
			return g.decidePersistentOverload(r, jitter)
		}
		if g.overload > budgetOverload {
			return decision{Code: FailProviderUnavailable, Fallback: true, Message: fmt.Sprintf("the model provider stayed overloaded through %d attempts: %s", g.overload, r.Message)}
		}
		if r.RetryAfter > maxRetryAfter {
			return decision{Code: FailProviderUnavailable, Fallback: true, Message: fmt.Sprintf("the model provider asked to wait %s, longer than the %s capstan waits", r.RetryAfter, maxRetryAfter)}
		}
		delay := r.RetryAfter
		if delay <= 0 {
			delay = overloadBackoff.Delay(g.overload, 0, jitter())
		}
		return decision{Retry: true, Delay: delay, Message: fmt.Sprintf("%s (overload %d/%d)", r.Message, g.overload, budgetOverload)}
	case model.OutcomeCutIdle:
		g.idle++
		if g.idle > budgetIdle {
			return decision{Code: FailModelIdleTimeout, Message: fmt.Sprintf("the model stream went idle again: %s", r.Message)}
		}
		return decision{Retry: true, Delay: time.Second, Message: fmt.Sprintf("%s (idle %d/%d)", r.Message, g.idle, budgetIdle)}
	case model.OutcomeInvalid:
		g.invalid++
		if g.invalid > budgetInvalid {
			return decision{Code: FailModelInvalidOutput, Message: fmt.Sprintf("the model kept answering with invalid output: %s", r.Message)}
		}
		return decision{Retry: true, Delay: 500 * time.Millisecond, Message: fmt.Sprintf("%s (invalid %d/%d)", r.Message, g.invalid, budgetInvalid)}
	case model.OutcomeCutTotal:
		return decision{Code: FailModelMaxDuration, Fallback: true, Message: r.Message}
	case model.OutcomeOverflow:
		return decision{Code: FailContextOverflow, Message: "the transcript no longer fits the model's context: " + r.Message}
	case model.OutcomeBreakerOpen:
		if !g.breakerWaits {
			return noRow(r)
		}
		// Nothing was sent: not a failure of the provider's, so no budget
		// is spent. Wait the time left, with jitter, so the tasks waiting
		// on one breaker do not all come back at once.
		return decision{Retry: true, BreakerWait: true, Delay: backoff.AfterWait.Delay(1, r.RetryAfter, jitter()),
			Message: r.Message} // the breaker's own words: which one, and why it refused
	case model.OutcomeRejected:
		msg := "the model provider rejected the request"
		if r.HTTPStatus != 0 {
			msg += fmt.Sprintf(" (HTTP %d)", r.HTTPStatus)
		}
		return decision{Code: FailProviderRejected, Message: msg + ": " + r.Message}
	default:
		return noRow(r)
	}
}

// decidePersistentOverload retries an overload until persistentOverloadFor
// has passed since the turn's first one, whatever the count: each wait is
// the provider's Retry-After or a full-jitter backoff, capped at
// maxRetryAfter and at the time left.
func (g *turnGuard) decidePersistentOverload(r attemptOutcome, jitter func() float64) decision {
	if g.overloadSince.IsZero() {
		g.overloadSince = r.At
	}
	spent := r.At.Sub(g.overloadSince)
	if spent >= persistentOverloadFor {
		return decision{Code: FailProviderUnavailable, Fallback: true, Message: fmt.Sprintf(
			"the model provider stayed overloaded for %s through %d attempts (persistent mode gives up after %s): %s",
			roundWait(spent), g.overload, persistentOverloadFor, r.Message)}
	}
	delay, capped := r.RetryAfter, ""
	switch {
	case delay <= 0:
		delay = persistentBackoff.Delay(g.overload, 0, jitter())
	case delay > maxRetryAfter:
		delay, capped = maxRetryAfter, fmt.Sprintf("; the provider asked for %s, capped at %s", r.RetryAfter, maxRetryAfter)
	}
	delay = min(delay, persistentOverloadFor-spent)
	return decision{Retry: true, Delay: delay, Message: fmt.Sprintf("%s (overload %d, persistent mode: %s of %s spent%s)",
		r.Message, g.overload, roundWait(spent), persistentOverloadFor, capped)}
}

// noRow is the decision on an outcome the guard has no row for.
func noRow(r attemptOutcome) decision {
	return decision{Code: FailProviderUnavailable, Message: fmt.Sprintf("the model attempt ended as %s: %s", r.Outcome, r.Message)}
}

func lostWorker(outcome model.Outcome) bool {
	return outcome == model.OutcomeWorkerLost || outcome == model.OutcomeCancelled
}

// completed clears the idle-cut count: only a completed attempt does.
func (g *turnGuard) completed() { g.idle = 0 }

// attemptOutcome is what the guard reads of an attempt.
type attemptOutcome struct {
	Outcome    model.Outcome
	Phase      model.Phase
	HTTPStatus int
	RetryAfter time.Duration
	Message    string
	Breaker    string // of a breaker_open attempt: the breaker that refused it
	// OutageLimit, of an attempt the ledger's breaker kept, is how long
	// the worker lets a task wait for its ledger (contract.BreakerWait).
	OutageLimit time.Duration
	// Usage is what the attempt spent (contract.AttemptReport.Usage),
	// UsageEstimated when it is the estimate.
	Usage          model.Usage
	UsageEstimated bool
	// At is when the workflow decides (workflow.Now); persistent mode
	// measures its time budget with it.
	At time.Time
}
