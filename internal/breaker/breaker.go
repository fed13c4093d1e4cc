// Package breaker holds capstan's circuit breakers (docs/design.md §7): one
// per dependency and operation class, keyed "model/<provider>",
// "github/read", "github/write", "slack/post" and "ledger", so that a pool of workers
// stops calling a dependency that is down within a few failures, sends
// nothing while the breaker is open, probes it with one call when the open
// period ends, and resumes on its own when the probe succeeds.
//
// A Set is one worker's breakers; every worker of a pool has its own, so a
// downed dependency receives at most the trip threshold plus one probe per
// open period from each worker. The breakers are github.com/sony/gobreaker's
// two-step breakers: Allow asks before a call and returns a Permit, and the
// caller reports what the call told about the dependency with Permit.Done —
// a Success (the dependency answered, even with a refusal), a Failure (it did
// not answer usefully: a transport failure, a 5xx, a 429, a timeout) or
// Ignored (the call proves nothing: cancelled, or never sent). Judging a
// call is the caller's: only it knows its client's errors.
//
// gobreaker reads the wall clock (time.Now) and takes no other, so a Set
// does too: the time left in an open period is counted on the same clock
// that ends it.
package breaker

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/capstanhq/capstan/internal/config"
)

// Key names one breaker: a dependency and a class of its operations.
type Key string

// The breakers of the dependencies capstan calls besides model providers.
const (
	GitHubRead  Key = "github/read"
	GitHubWrite Key = "github/write"
	SlackPost   Key = "slack/post"
	// Ledger guards the worker's ledger (CAPSTAN_LEDGER_DSN): while it is
	// open, nothing that needs the ledger is attempted, and the tasks
	// waiting on it wait it out (docs/design.md §7).
	Ledger Key = "ledger"
)

// Model is the key of a model provider's breaker, "model/<provider>".
func Model(provider string) Key { return Key("model/" + provider) }

// State is where a breaker stands.
type State string

// Breaker states.
const (
	// StateClosed: calls go through; failures are counted.
	StateClosed State = "closed"
	// StateOpen: nothing is sent until the open period ends.
	StateOpen State = "open"
	// StateHalfOpen: the open period ended; one probe call goes through,
	// and its outcome closes the breaker or opens it again.
	StateHalfOpen State = "half-open"
)

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// windowBuckets is how many buckets the rolling window is cut into: a
// failure leaves the ratio at most a tenth of the window late.
const windowBuckets = 10

// halfOpenWait is how long a call refused while the probe is in flight is
// asked to wait (at most the open period): the probe's answer decides soon.
const halfOpenWait = time.Second

// trialWait is how long a call refused while a closed breaker's trial is
// in flight is asked to wait: a healthy dependency answers the trial in a
// fraction of that, and then every call goes through again.
const trialWait = 250 * time.Millisecond

// Transition is a breaker changing state.
type Transition struct {
	Key      Key
	From, To State
	At       time.Time
	// OpenUntil is when an open period that just began ends; zero unless
	// To is StateOpen.
	OpenUntil time.Time
}

// Options are what a Set reports to.
type Options struct {
	// Logger receives one line per transition (a warning when a breaker
	// opens). Default slog.Default().
	Logger *slog.Logger
	// OnStateChange, when set, is called with every transition, for
	// metrics. It runs synchronously while the breaker is locked: it must
	// be quick and must not call back into the Set.
	OnStateChange func(Transition)
}

// Set is one worker's breakers, created on first use of their key. It is
// safe for concurrent use. A nil *Set lets every call through: breakers off.
type Set struct {
	settings config.BreakerSettings
	opts     Options

	mu       sync.Mutex
	breakers map[Key]*entry
	// perKey are the thresholds of the keys configured apart (Configure).
	perKey map[Key]config.BreakerSettings
}

// entry is one breaker, the end of its current open period (which gobreaker
// keeps to itself), and its trial slot.
type entry struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	settings config.BreakerSettings

	mu        sync.Mutex
	openUntil time.Time
	// trial is held by the one call a closed breaker lets through while
	// it knows nothing good of its dependency (see Allow).
	trial bool
	// answered: a call through this breaker has been answered (a success,
	// or a stream's headers) since the worker started.
	answered bool
}

// NewSet returns a Set whose breakers all use the thresholds s (the
// worker's configuration, CAPSTAN_BREAKER_*); it fails on settings that
// their Validate refuses.
func NewSet(s config.BreakerSettings, o Options) (*Set, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Set{settings: s, opts: o, breakers: map[Key]*entry{}}, nil
}

// Settings returns the thresholds of the Set's breakers.
func (s *Set) Settings() config.BreakerSettings { return s.settings }

// Configure gives key's breaker thresholds of its own (an MCP server's
// capstan.breaker), in place of the Set's. It must be called before the
// key's first use; it fails on settings their Validate refuses, or on a key
// already in use. Configure on a nil Set does nothing.
func (s *Set) Configure(key Key, st config.BreakerSettings) error {
	if s == nil {
		return nil
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("breaker %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, used := s.breakers[key]; used {
		return fmt.Errorf("breaker %s is already in use: configure it before its first call", key)
	}
	if s.perKey == nil {
		s.perKey = map[Key]config.BreakerSettings{}
	}
	s.perKey[key] = st
	return nil
}

// errFailure and errIgnored carry a Permit's outcome into gobreaker.
var (
	errFailure = errors.New("breaker: the call failed")
	errIgnored = errors.New("breaker: the call proves nothing")
)

func (s *Set) breaker(key Key) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.breakers[key]; ok {
		return e
	}
	st := s.settings
	if own, ok := s.perKey[key]; ok {
		st = own
	}
	e := &entry{settings: st}
	e.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         string(key),
		MaxRequests:  1, // one half-open probe
		Interval:     st.Window,
		BucketPeriod: max(st.Window/windowBuckets, time.Millisecond),
		Timeout:      st.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			judged := c.TotalSuccesses + c.TotalFailures
			return c.ConsecutiveFailures >= uint32(st.ConsecutiveFailures) ||
				(judged >= uint32(st.MinCalls) && float64(c.TotalFailures) >= st.FailureRatio*float64(judged))
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return errors.Is(err, errIgnored) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.changed(key, e, stateOf(from), stateOf(to))
		},
	})
	s.breakers[key] = e
	return e
}

// changed records and reports a transition. gobreaker calls it with the
// breaker locked, right after it read the clock that starts the period.
func (s *Set) changed(key Key, e *entry, from, to State) {
	t := Transition{Key: key, From: from, To: to, At: time.Now()}
	e.mu.Lock()
	if to == StateOpen {
		e.openUntil = t.At.Add(e.settings.OpenFor)
		t.OpenUntil = e.openUntil
	} else {
		e.openUntil = time.Time{}
	}
	e.mu.Unlock()
	attrs := []any{"breaker", string(key), "from", string(from), "to", string(to)}
	if to == StateOpen {
		s.opts.Logger.Warn("breaker opened: nothing is sent to "+string(key)+" until the open period ends",
			append(attrs, "open_for", e.settings.OpenFor.String(), "open_until", t.OpenUntil)...)
	} else {
		s.opts.Logger.Info("breaker state changed", attrs...)
	}
	if s.opts.OnStateChange != nil {
		s.opts.OnStateChange(t)
	}
}

// OpenError is a call the breaker refused: nothing was sent.
type OpenError struct {
	Key Key
	// State is StateOpen; StateHalfOpen while the probe is in flight; or
	// StateClosed while the trial call of a breaker that knows nothing
	// good of its dependency is in flight.
	State State
	// Wait is how long until the breaker may let a call through: the time
	// left in the open period, or a short wait for the probe's answer.
	Wait time.Duration
}

func (e *OpenError) Error() string {
	switch e.State {
	case StateHalfOpen:
		return fmt.Sprintf("breaker %s is half-open and its one probe is in flight: nothing was sent", e.Key)
	case StateClosed:
		return fmt.Sprintf("breaker %s has no answer from its dependency yet, or saw its last call fail, so it lets one call through at a time until one is answered; that call is in flight: nothing was sent", e.Key)
	}
	return fmt.Sprintf("breaker %s is open for %s more: nothing was sent", e.Key, e.Wait.Round(time.Millisecond))
}

// Allow asks key's breaker for leave to send one call. It returns a Permit
// whose Done must be called once the call has ended, or an *OpenError when
// the breaker is open, its probe is in flight, or its trial call is in
// flight: then nothing may be sent. A nil Set allows every call.
//
// A closed breaker that knows nothing good of its dependency — no call has
// been answered since the worker started, or its last judged call failed —
// lets one call through at a time (its trial) until one is answered.
// gobreaker judges a call only when it returns, so without the trial every
// call sent while the first failures were still on their way back would
// reach a dependency that is down: with it, a worker that starts while a
// dependency is down sends it one call at a time up to the trip threshold,
// and a worker that sees a dependency go down sends it at most the calls
// already in flight when the first failure came back, then one at a time.
func (s *Set) Allow(key Key) (*Permit, error) {
	if s == nil {
		return &Permit{}, nil
	}
	e := s.breaker(key)
	// State and Counts lock gobreaker; e.mu is taken only after them, as
	// changed takes it under gobreaker's lock.
	closed := e.cb.State() == gobreaker.StateClosed
	failing := closed && e.cb.Counts().ConsecutiveFailures > 0
	e.mu.Lock()
	trial := closed && (failing || !e.answered)
	busy := trial && e.trial
	if trial && !busy {
		e.trial = true
	}
	e.mu.Unlock()
	if busy {
		return nil, &OpenError{Key: key, State: StateClosed, Wait: min(trialWait, e.settings.OpenFor)}
	}
	p := &Permit{entry: e, trial: trial}
	done, err := e.cb.Allow()
	if err != nil {
		p.release(false)
	}
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		e.mu.Lock()
		left := time.Until(e.openUntil)
		e.mu.Unlock()
		return nil, &OpenError{Key: key, State: StateOpen, Wait: max(left, 0)}
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, &OpenError{Key: key, State: StateHalfOpen, Wait: min(halfOpenWait, e.settings.OpenFor)}
	case err != nil:
		return nil, fmt.Errorf("breaker %s: %w", key, err)
	}
	p.done = done
	return p, nil
}

// State returns key's breaker's state; a breaker never used is closed.
func (s *Set) State(key Key) State {
	if s == nil {
		return StateClosed
	}
	s.mu.Lock()
	e, ok := s.breakers[key]
	s.mu.Unlock()
	if !ok {
		return StateClosed
	}
	return stateOf(e.cb.State())
}

// Keys returns the keys of the breakers used so far, sorted.
func (s *Set) Keys() []Key {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]Key, 0, len(s.breakers))
	for k := range s.breakers {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// Outcome is what one call told about its dependency.
type Outcome int

// Outcomes of a call.
const (
	// Success: the dependency answered — with a result, or with a definite
	// refusal such as a 4xx, which shows it is up.
	Success Outcome = iota
	// Failure: a transport failure, a 5xx, a 429 or a timeout.
	Failure
	// Ignored: the call proves nothing about the dependency — it was
	// cancelled, its worker went away, or it was never sent.
	Ignored
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignored:
		return "ignored"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Permit is one call a breaker let through.
type Permit struct {
	once  sync.Once
	done  func(error) // nil when breakers are off
	entry *entry      // nil when breakers are off
	trial bool        // the call holds its breaker's trial slot

	releaseOnce sync.Once
}

// release frees the trial slot, if the call holds it, once; answered
// records that the dependency answered the call.
func (p *Permit) release(answered bool) {
	if p.entry == nil {
		return
	}
	p.entry.mu.Lock()
	defer p.entry.mu.Unlock()
	if answered {
		p.entry.answered = true
	}
	p.releaseOnce.Do(func() {
		if p.trial {
			p.entry.trial = false
		}
	})
}

// Answered tells the breaker the dependency has begun to answer the call
// (a model stream's headers came): a trial call frees its slot for the
// next call now, rather than holding it through a long stream, while the
// call is judged, as always, by Done. Answered on a nil Permit does nothing.
func (p *Permit) Answered() {
	if p == nil {
		return
	}
	p.release(true)
}

// Done reports how the call went. Only the first Done counts, so a caller
// may defer Done(Ignored) as a guard for the paths that send nothing after
// all: a permit never reported would hold a half-open breaker's only probe
// forever. Done on a nil Permit does nothing.
func (p *Permit) Done(o Outcome) {
	if p == nil {
		return
	}
	p.once.Do(func() {
		// The judgement first, then the slot: the next trial sees this
		// call's outcome in the counts.
		defer p.release(o == Success)
		if p.done == nil {
			return
		}
		switch o {
		case Success:
			p.done(nil)
		case Failure:
			p.done(errFailure)
		default:
			p.done(errIgnored)
		}
	})
}
