package config

import (
	"fmt"
	"time"
)

// ModelLimits are the watchdogs of a model attempt as configuration holds
// them: plain values, with the fields of model.Limits in its order, so each
// converts to the other (model.Limits(l)). internal/model imports this
// package for its defaults; this package imports no capstan package.
type ModelLimits struct {
	// FirstEvent bounds the wait for the first stream event; zero means Idle.
	FirstEvent time.Duration
	// Idle bounds the silence between two stream events.
	Idle time.Duration
	// Total bounds the whole attempt.
	Total time.Duration
	// HeartbeatTimeout is how long the worker may go without a heartbeat
	// before Temporal declares it lost.
	HeartbeatTimeout time.Duration
}

// Validate reports, in one sentence, why l cannot work: an attempt must be
// allowed to go idle, and wait for its first event, for less than its
// total limit. l must have its defaults filled (model.Limits.Validate
// fills them); a zero FirstEvent follows Idle.
func (l ModelLimits) Validate() error {
	first := l.FirstEvent
	if first <= 0 {
		first = l.Idle
	}
	switch {
	case l.Idle >= l.Total:
		return fmt.Errorf("the idle timeout (%s) must be shorter than the attempt's total limit (%s)", l.Idle, l.Total)
	case first >= l.Total:
		return fmt.Errorf("the first-event timeout (%s) must be shorter than the attempt's total limit (%s)", first, l.Total)
	}
	return nil
}
