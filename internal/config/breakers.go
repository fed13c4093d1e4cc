package config

import (
	"fmt"
	"time"
)

// BreakerSettings are the thresholds of every circuit breaker of a worker
// (docs/design.md §7), read from CAPSTAN_BREAKER_*: plain values, which
// internal/breaker turns into its breakers' settings.
type BreakerSettings struct {
	// ConsecutiveFailures trips a breaker after that many failures in a row.
	ConsecutiveFailures int
	// FailureRatio trips a breaker when at least that share of the calls
	// judged within Window failed, once there were at least MinCalls.
	FailureRatio float64
	MinCalls     int
	// Window is the rolling period the ratio is counted over.
	Window time.Duration
	// OpenFor is how long an open breaker sends nothing before it lets one
	// probe through.
	OpenFor time.Duration
}

// Validate reports the first setting a breaker cannot work with.
func (s BreakerSettings) Validate() error {
	switch {
	case s.ConsecutiveFailures < 1:
		return fmt.Errorf("breaker: consecutive failures must be at least 1, not %d", s.ConsecutiveFailures)
	case s.FailureRatio <= 0 || s.FailureRatio > 1:
		return fmt.Errorf("breaker: failure ratio must be above 0 and at most 1, not %g", s.FailureRatio)
	case s.MinCalls < 1:
		return fmt.Errorf("breaker: minimum calls must be at least 1, not %d", s.MinCalls)
	case s.Window <= 0:
		return fmt.Errorf("breaker: window must be positive, not %s", s.Window)
	case s.OpenFor <= 0:
		return fmt.Errorf("breaker: open period must be positive, not %s", s.OpenFor)
	}
	return nil
}
