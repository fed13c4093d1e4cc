package contract

import "time"

// BreakerWait is the detail of an ErrTypeBreakerOpen error: which breaker
// refused the call and how long the workflow should wait before trying
// again (the time left in its open period, plus jitter).
type BreakerWait struct {
	Breaker string        `json:"breaker"`
	State   string        `json:"state"` // open, or half-open while its probe is in flight
	Wait    time.Duration `json:"wait"`
}

// JitterAfter returns wait plus a random share r ∈ [0,1) of its spread, a
// fifth of wait, at least 200 ms and at most 5 s. Every caller told to wait
// — by an open breaker, a rate limit's Retry-After, another claim's lease —
// comes back no sooner than told, and not all at the same instant. The
// activities draw r from their random source; the workflow's turn guard
// from a workflow.SideEffect, so its waits replay.
func JitterAfter(wait time.Duration, r float64) time.Duration {
	wait = max(wait, 0)
	spread := min(max(wait/5, 200*time.Millisecond), 5*time.Second)
	return wait + time.Duration(r*float64(spread))
}
