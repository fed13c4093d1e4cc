package model

import (
	"time"

	"github.com/capstanhq/capstan/internal/config"
)

// Limits are the watchdogs of one model attempt (docs/design.md §4.2). A task
// carries them in its input, so the activity that enforces them and the
// workflow that sets the activity's timeouts read one value. (The connect
// timeout is the worker's: it belongs to the provider's HTTP client.)
type Limits struct {
	// FirstEvent bounds the wait for the first stream event; zero means Idle.
	FirstEvent time.Duration `json:"first_event,omitempty"`
	// Idle bounds the silence between two stream events.
	Idle time.Duration `json:"idle,omitempty"`
	// Total bounds the whole attempt.
	Total time.Duration `json:"total,omitempty"`
	// HeartbeatTimeout is how long the worker may go without a heartbeat
	// before Temporal declares it lost; it heartbeats three times as often.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
}

// WithDefaults returns l with every zero field taken from
// config.DefaultModelLimits, and FirstEvent from Idle. It is a pure
// function: workflow code calls it.
func (l Limits) WithDefaults() Limits {
	d := Limits(config.DefaultModelLimits)
	if l.Idle <= 0 {
		l.Idle = d.Idle
	}
	if l.FirstEvent <= 0 {
		l.FirstEvent = l.Idle
	}
	if l.Total <= 0 {
		l.Total = d.Total
	}
	if l.HeartbeatTimeout <= 0 {
		l.HeartbeatTimeout = d.HeartbeatTimeout
	}
	return l
}

// HeartbeatInterval is how often an attempt heartbeats: three beats fit in
// one heartbeat timeout, so one lost beat never looks like a lost worker.
func (l Limits) HeartbeatInterval() time.Duration { return l.WithDefaults().HeartbeatTimeout / 3 }

// Under returns l with each field it leaves unset taken from defaults — a
// task's own limits over the worker's. The first-event wait follows l's
// idle timeout when l sets that and defaults sets no first-event wait of
// its own. It is a pure function: workflow code calls it.
func (l Limits) Under(defaults Limits) Limits {
	if l.FirstEvent <= 0 && (l.Idle <= 0 || defaults.FirstEvent > 0) {
		l.FirstEvent = defaults.FirstEvent
	}
	if l.Idle <= 0 {
		l.Idle = defaults.Idle
	}
	if l.Total <= 0 {
		l.Total = defaults.Total
	}
	if l.HeartbeatTimeout <= 0 {
		l.HeartbeatTimeout = defaults.HeartbeatTimeout
	}
	return l
}

// Validate reports, in one sentence, why l (with its defaults) cannot
// work: an attempt must be allowed to go idle, and wait for its first
// event, for less than its total limit.
func (l Limits) Validate() error {
	return config.ModelLimits(l.WithDefaults()).Validate()
}
