// Package backoff is capstan's one retry delay (docs/design.md §7): full
// jitter over a span that grows with each retry up to a cap, on top of a
// floor — the wait the other side named (a Retry-After, the time left in a
// breaker's open period, another holder's lease) — so that nobody comes
// back sooner than told, and a crowd that failed or was told to wait
// together does not come back together.
//
// Guarantees:
//   - The package draws no random number. The caller passes its draw r ∈
//     [0,1): an activity from its injected Deps.Random, a workflow from
//     workflow.SideEffect. The same arguments always give the same delay, so
//     a workflow replays the delays it recorded, and tests pass a fixed or
//     seeded draw.
//   - The result lies in [floor, floor+span], span being what Policy.Span
//     and the floor allow (see Delay); it is never negative and never
//     overflows.
//   - It imports only the standard library, so any package — the workflow's
//     leaf packages included — can use it.
//
// Modelled on temporal's common/backoff (FullJitter) and tailscale's
// logtail/backoff, with the randomness taken out.
package backoff

import (
	"math"
	"time"
)

// Policy is how a retry's jitter span grows: Base for the first retry,
// times Multiplier for each one after, never above Cap.
type Policy struct {
	// Base is the span of the first retry.
	Base time.Duration
	// Cap bounds the span; zero or less means no bound.
	Cap time.Duration
	// Multiplier is the span's growth per retry; below 1 (the zero value)
	// means 2, doubling.
	Multiplier float64
}

// AfterWait is the policy of a wait the other side named, passed to Delay as
// the floor: the wait itself, plus up to a fifth of it, at least 200 ms and
// at most 5 s. Every caller told to wait comes back no sooner than told, and
// not all at the same instant.
var AfterWait = Policy{Base: 200 * time.Millisecond, Cap: 5 * time.Second}

// floorSpread: the span is at least a floorSpread-th of the floor (below
// Cap), so a long named wait spreads its return in proportion.
const floorSpread = 5

// Span returns the jitter span of retry n (1-based; below 1 counts as 1)
// before any floor: min(Cap, Base·Multiplier^(n-1)).
func (p Policy) Span(n int) time.Duration {
	m := p.Multiplier
	if m < 1 {
		m = 2
	}
	span := float64(max(p.Base, 0)) * math.Pow(m, float64(max(n, 1)-1))
	if p.Cap > 0 {
		span = min(span, float64(p.Cap))
	}
	return saturate(span)
}

// Delay is the wait before retry n (1-based) under p, given floor, the least
// wait the other side named (zero or less: none), and r, the caller's
// uniform draw from [0,1) (clamped to [0,1]):
//
//	floor + r · min(Cap, max(Span(n), floor/5))
//
// With no floor it is full jitter, uniform over [0, Span(n)). With one, the
// jitter comes on top of it, over a span of at least a fifth of the floor,
// still within Cap.
func (p Policy) Delay(n int, floor time.Duration, r float64) time.Duration {
	floor = max(floor, 0)
	span := max(p.Span(n), floor/floorSpread)
	if p.Cap > 0 {
		span = min(span, p.Cap)
	}
	switch {
	case !(r > 0): // also NaN
		r = 0
	case r > 1:
		r = 1
	}
	jitter := saturate(r * float64(span))
	if jitter > math.MaxInt64-floor {
		return math.MaxInt64
	}
	return floor + jitter
}

// saturate converts a non-negative duration in float nanoseconds, bounding
// it by the largest time.Duration.
func saturate(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
