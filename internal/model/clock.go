package model

import "time"

// Clock starts the timers an attempt waits on: its watchdogs and its
// heartbeat. RealClock is the one production uses; a test passes its own to
// fire a watchdog when it chooses, instead of waiting for one to expire.
type Clock interface {
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a timer that fires every d.
	NewTicker(d time.Duration) Timer
}

// Timer is a running timer or ticker.
type Timer interface {
	// C delivers the firings.
	C() <-chan time.Time
	// Reset makes the timer fire d from now (a ticker: every d), dropping
	// any firing not yet received.
	Reset(d time.Duration)
	// Stop ends the firings.
	Stop()
}

// RealClock is the time package's clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) NewTimer(d time.Duration) Timer  { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Timer { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time   { return t.t.C }
func (t realTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t realTimer) Stop()                 { t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }
func (t realTicker) Stop()                 { t.t.Stop() }
