package model

import (
	"fmt"
	"time"

	"github.com/capstanhq/capstan"
)

// Outcome classifies an attempt for the turn guard (docs/design.md §4.4).
// It is the guard's own table, not what is known about an effect
// (capstan.Outcome), but where the words are the same — not sent, unknown,
// cancelled — it spells them as the vocabulary does.
type Outcome string

const (
	OutcomeCompleted  Outcome = "completed"
	OutcomeNotSent            = Outcome(capstan.OutcomeNotSent)
	OutcomeOverloaded Outcome = "overloaded"
	OutcomeRejected   Outcome = "rejected"
	OutcomeCutIdle    Outcome = "cut_idle"
	OutcomeCutTotal   Outcome = "cut_total"
	OutcomeInvalid    Outcome = "invalid"
	OutcomeOverflow   Outcome = "overflow"
	OutcomeWorkerLost Outcome = "worker_lost"
	OutcomeCancelled          = Outcome(capstan.OutcomeCancelled)
	OutcomeUnknown            = Outcome(capstan.OutcomeUnknown)
	// OutcomeBreakerOpen: the provider's breaker was open, so nothing was
	// sent; the attempt's RetryAfter is the time left in the open period.
	OutcomeBreakerOpen Outcome = "breaker_open"
)

// AttemptError is how a provider reports a failed attempt: the outcome class,
// the phase reached, the HTTP status if headers arrived, and the provider's
// own words. RetryAfter is set when the provider asked for a delay.
type AttemptError struct {
	Outcome    Outcome
	Phase      Phase
	HTTPStatus int
	RetryAfter time.Duration
	Message    string
	Err        error
}

func (e *AttemptError) Error() string {
	s := fmt.Sprintf("model attempt %s at %s", e.Outcome, e.Phase)
	if e.HTTPStatus != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.HTTPStatus)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *AttemptError) Unwrap() error { return e.Err }
