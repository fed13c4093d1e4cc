package reconcilers

import (
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/tools"
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
	tools.Finder
}

// Set holds the lookups of every kind of operation a worker can reconcile.
// It is immutable after NewSet, so it is safe for concurrent use.
type Set struct {
	byKind map[string]tools.Finder
}

// NewSet returns the lookups of the tools of reg that are tools.Finders,
// under their names, and of sources. reg may be nil. Two lookups for one
// kind are a programming error, so it panics rather than let one shadow the
// other.
func NewSet(reg *tools.Registry, sources ...Source) *Set {
	s := &Set{byKind: map[string]tools.Finder{}}
	add := func(kind string, f tools.Finder) {
		if _, dup := s.byKind[kind]; dup {
			panic(fmt.Sprintf("reconcilers: two lookups for kind %q", kind))
		}
		s.byKind[kind] = f
	}
	if reg != nil {
		for _, name := range reg.Names() {
			t, _ := reg.Get(name) // a name the registry lists
			if f, ok := t.(tools.Finder); ok {
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
// tools.ErrNotConfigured (this worker lacks the lookup's client) or
// ErrBadTarget (no question can be formed from sent).
func (s *Set) Effect(kind string, sent tools.Sent) (tools.Effect, error) {
	f, ok := s.byKind[kind]
	if !ok {
		return nil, fmt.Errorf("%q: %w", kind, ErrNoReconciler)
	}
	e, err := f.Effect(sent)
	switch {
	case errors.Is(err, tools.ErrNotConfigured):
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
