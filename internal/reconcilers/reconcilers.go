package reconcilers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/tool"
)

var (
	// ErrNoReconciler: nothing knows how to look for this kind of
	// operation; only a person can tell.
	ErrNoReconciler = errors.New("no reconciler for this kind of operation")
	// ErrBadTarget: the question cannot be formed from what was sent
	// (arguments or facts that do not parse, no operation id); asking
	// again cannot help.
	ErrBadTarget = errors.New("cannot form the reconciler's question")
)

// Source makes effects that can be found again, under the name the ledger
// records as its operations' kind: a delivery, say. A tool needs no Source:
// NewSet takes it from the registry.
type Source interface {
	Name() string
	tool.Finder
}

// Set holds the lookups of every kind of operation a worker can reconcile.
// It is immutable after NewSet, so it is safe for concurrent use.
type Set struct {
	byKind map[string]tool.Finder
}

// NewSet returns the lookups of the tools of reg that are tool.Finders,
// under their names, and of sources. reg may be nil. Two lookups for one
// kind are a programming error, so it panics rather than let one shadow the
// other.
func NewSet(reg *tool.Registry, sources ...Source) *Set {
	s := &Set{byKind: map[string]tool.Finder{}}
	add := func(kind string, f tool.Finder) {
		if _, dup := s.byKind[kind]; dup {
			panic(fmt.Sprintf("reconcilers: two lookups for kind %q", kind))
		}
		s.byKind[kind] = f
	}
	if reg != nil {
		for _, name := range reg.Names() {
			t, _ := reg.Get(name) // a name the registry lists
			if f, ok := t.(tool.Finder); ok {
				add(name, f)
			}
		}
	}
	for _, src := range sources {
		add(src.Name(), src)
	}
	return s
}

// Effect returns the effect an operation of kind left, as its lookup reads
// it from sent. Its error wraps ErrNoReconciler (no lookup for kind),
// tool.ErrNotConfigured (this worker lacks the lookup's client) or
// ErrBadTarget (no question can be formed from sent).
func (s *Set) Effect(kind string, sent tool.Sent) (tool.Effect, error) {
	f, ok := s.byKind[kind]
	if !ok {
		return nil, fmt.Errorf("%q: %w", kind, ErrNoReconciler)
	}
	e, err := f.Effect(sent)
	switch {
	case errors.Is(err, tool.ErrNotConfigured):
		return nil, fmt.Errorf("%s: %w", kind, err)
	case sent.OperationID == "":
		return nil, fmt.Errorf("%s: %w: no operation id", kind, ErrBadTarget)
	case err != nil:
		return nil, fmt.Errorf("%s: %w: %w", kind, ErrBadTarget, err)
	case e == nil:
		return nil, fmt.Errorf("%s: %w: the lookup gave no effect", kind, ErrBadTarget)
	}
	return e, nil
}

// Question is one reconciliation: the operation, and how long its effect
// may take to show.
type Question struct {
	// Kind is the ledger's Operation.Kind: a tool's name, or a delivery's
	// kind.
	Kind string
	// Sent is the call whose answer was lost.
	Sent tool.Sent
	// Deadline ends the consistency window; Window is its length, for the
	// reasons given.
	Deadline time.Time
	Window   time.Duration
	// Resend lets an effect that is a tool.Settler be settled by sending
	// the call again once its first lookup saw nothing (see Reconcile).
	Resend bool
}

// Pace is how a reconciliation waits and reports; the caller injects it.
type Pace struct {
	Now func() time.Time
	// Backoff is the wait after the n-th question (from 0) that concluded
	// nothing; a wait never runs past the deadline.
	Backoff func(n int) time.Duration
	// Asked, when set, hears after each question how many have been asked
	// and what the last one saw, or why it could not ask.
	Asked func(asked int, last string)
	// Resending, when set, is asked before a Settler is sent again (the
	// dependency's breaker): ok false sends nothing and the lookups go on;
	// done hears the re-send's error (nil: it was answered and settled).
	Resending func() (done func(err error), ok bool)
}

// Answer is what a reconciliation concluded.
type Answer struct {
	// State is what the ledger is to record: SUCCEEDED (found), ABSENT
	// (not seen through the whole window) or NEEDS_HUMAN (nobody can tell).
	State      capstan.Outcome
	ExternalID string // what was found, as its tool records it
	Reason     string // one sentence: what was asked and seen
	Asked      int    // how many questions were asked
	// Key is what was looked for (tool.Effect.Key); empty when no lookup
	// could be formed.
	Key string
}

// Reconcile asks about q's operation until the verdict rules (see the
// package documentation) give a final answer. With q.Resend, an effect
// that is a tool.Settler whose first lookup answered NotSeen is sent
// again, once: Found or Ambiguous from it is the answer at once; an error
// from it settles nothing, and the lookups go on through the window. Its errors: one wrapping
// tool.ErrNotConfigured before any question (this worker cannot ask about
// q.Kind), or one wrapping the context's error if ctx ends first, or a
// lookup that answered an outcome it should not have. None is a verdict;
// the operation stays unknown.
func (s *Set) Reconcile(ctx context.Context, q Question, p Pace) (Answer, error) {
	effect, err := s.Effect(q.Kind, q.Sent)
	switch {
	case errors.Is(err, tool.ErrNotConfigured):
		return Answer{}, err
	case err != nil:
		p.asked(1, "could not ask: "+err.Error())
		return Answer{State: capstan.OutcomeNeedsHuman, Reason: fmt.Sprintf("the reconciler cannot tell: %v", err), Asked: 1}, nil
	}
	ans := Answer{Key: effect.Key()}
	failed := 0
	var settler tool.Settler // asked once, after the first NotSeen
	if s, ok := effect.(tool.Settler); ok && q.Resend {
		settler = s
	}
	for n := 0; ; n++ {
		askedAt := p.Now()
		obs, err := effect.Find(ctx)
		ans.Asked++
		if ctx.Err() != nil {
			return ans, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		last := obs.Detail
		if err != nil {
			last = "could not ask: " + err.Error()
		}
		p.asked(ans.Asked, last)
		end := !askedAt.Before(q.Deadline) // this question was asked at the end of the window
		switch {
		case err != nil:
			failed++
			if end {
				ans.State, ans.Reason = capstan.OutcomeNeedsHuman, fmt.Sprintf(
					"could not ask whether the operation took effect: %d of %d questions over the %s consistency window failed, the last one at its end: %v",
					failed, ans.Asked, q.Window, err)
				return ans, nil
			}
		case obs.Outcome == tool.Found:
			ans.State, ans.ExternalID, ans.Reason = capstan.OutcomeSucceeded, obs.ExternalID, obs.Detail
			return ans, nil
		case obs.Outcome == tool.Ambiguous:
			ans.State, ans.Reason = capstan.OutcomeNeedsHuman, obs.Detail
			return ans, nil
		case obs.Outcome == tool.NotSeen && settler != nil:
			// The service holds one effect per key: send again, once.
			sobs, serr, sent := p.settle(ctx, settler)
			settler = nil
			if !sent {
				p.asked(ans.Asked, "not sent again: its breaker is open")
				break
			}
			ans.Asked++
			if ctx.Err() != nil {
				return ans, fmt.Errorf("interrupted: %w", ctx.Err())
			}
			if serr != nil {
				p.asked(ans.Asked, "sent again, nothing settled: "+serr.Error())
				break // look on within the window
			}
			p.asked(ans.Asked, sobs.Detail)
			switch sobs.Outcome {
			case tool.Found:
				ans.State, ans.ExternalID, ans.Reason = capstan.OutcomeSucceeded, sobs.ExternalID, sobs.Detail
				return ans, nil
			case tool.Ambiguous:
				ans.State, ans.Reason = capstan.OutcomeNeedsHuman, sobs.Detail
				return ans, nil
			}
			return ans, fmt.Errorf("the re-send of %s answered %q", q.Kind, sobs.Outcome)
		case obs.Outcome == tool.NotSeen:
			if end {
				ans.State, ans.Reason = capstan.OutcomeAbsent, fmt.Sprintf("not seen through the %s consistency window (%d questions): %s",
					q.Window, ans.Asked, obs.Detail)
				return ans, nil
			}
		default:
			return ans, fmt.Errorf("the lookup of %s answered %q", q.Kind, obs.Outcome)
		}
		if err := sleep(ctx, min(p.Backoff(n), q.Deadline.Sub(p.Now()))); err != nil {
			return ans, fmt.Errorf("interrupted: %w", err)
		}
	}
}

// settle sends the call again through p.Resending; sent is false when
// that refused it.
func (p Pace) settle(ctx context.Context, s tool.Settler) (tool.Observation, error, bool) {
	done := func(error) {}
	if p.Resending != nil {
		var ok bool
		if done, ok = p.Resending(); !ok {
			return tool.Observation{}, nil, false
		}
	}
	obs, err := s.Settle(ctx)
	done(err)
	return obs, err, true
}

func (p Pace) asked(n int, last string) {
	if p.Asked != nil {
		p.Asked(n, last)
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
