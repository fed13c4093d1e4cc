package sandbox

import (
	"sync"
	"time"
)

// This file gives the external tests (package sandbox_test) what only tests
// may use.

// SetNow replaces the GitHub fake's clock.
func (g *GitHub) SetNow(now func() time.Time) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	g.now = now
}

// SetNow replaces the model fake's clock, which stamps its request log.
func (m *Model) SetNow(now func() time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = now
}

// SetNow replaces the Slack fake's clock.
func (s *Slack) SetNow(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// ManualClock is a clock that moves only when told, so a test of lagging
// reads never waits for time to pass.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock standing at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// SetOnHold makes h run each time a FaultDelay starts holding an answer, so a
// test can act while the answer is held instead of guessing when it is.
func (f *faultRules) SetOnHold(h func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onHold = h
}
