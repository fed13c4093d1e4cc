package contract

import "time"

// BreakerWait is the detail of an ErrTypeBreakerOpen error: which breaker
// refused the call and how long the workflow should wait before trying
// again (the time left in its open period, plus jitter).
type BreakerWait struct {
	Breaker string        `json:"breaker"`
	State   string        `json:"state"` // open, or half-open while its probe is in flight
	Wait    time.Duration `json:"wait"`
	// OutageLimit, for the ledger's breaker, is how long the worker lets a
	// task wait for its ledger in one outage (CAPSTAN_LEDGER_OUTAGE_LIMIT)
	// before it fails ledger_unavailable; zero from a worker that predates
	// it, which the workflow reads as the default.
	OutageLimit time.Duration `json:"outage_limit,omitempty"`
}
