package tool

import (
	"context"
	"encoding/json"
	"errors"
)

// This file holds the optional sides of a tool made by New. capstan tests
// for a side with a type assertion (a tool that is a Finder is reconciled
// by its lookup, one that is Guarded goes through its own breaker), so a
// tool must have a side only when its option was given. A Go type's
// methods are fixed, so each combination of sides is a type of its own
// (sides_gen.go): the core, and one small struct per side, each holding
// the core and giving one method.

// ApprovalTexter is implemented by a tool that says in its own words what a
// person asked to approve a call is approving (docs/design.md §5.9). A tool
// that is not one is described by its Target (a pull request, a branch, a
// file) or its Summary.
type ApprovalTexter interface {
	// ApprovalText is one line for people, read from args as Execute
	// reads them; "" (for arguments Identify rejects, say) leaves the
	// description to the target or the summary. It does no I/O.
	ApprovalText(args json.RawMessage) string
}

// sides is a set of optional sides, one bit each.
type sides uint8

const (
	sideFinder sides = 1 << iota
	sideVerifier
	sideGuarded
	sideTargeted
	sidePreparer
	sideApproval
	allSides = 1<<iota - 1
)

// has is the set of sides c's options asked for.
func (c *core[In, Out]) has() sides {
	var s sides
	for _, side := range []struct {
		given bool
		side  sides
	}{{c.lookup != nil, sideFinder}, {c.verify != nil, sideVerifier}, {c.breaker != "", sideGuarded},
		{c.targets != nil, sideTargeted}, {c.prepare != nil, sidePreparer}, {c.approval != nil, sideApproval}} {
		if side.given {
			s |= side.side
		}
	}
	return s
}

// finder is the Finder side (Lookup).
type finder[In, Out any] struct{ c *core[In, Out] }

// Effect parses s's arguments with the tool's parser into the effect its
// lookup finds. It does no I/O.
func (f finder[In, Out]) Effect(s Sent) (Effect, error) {
	if s.OperationID == "" {
		return nil, errors.New("the call has no operation id to find its effect by")
	}
	in, err := f.c.parse(s.Arguments)
	if err != nil {
		return nil, err
	}
	e := lookupEffect[In, Out]{c: f.c, sent: s, in: in}
	if f.c.readBack != nil {
		return readBackEffect[In, Out]{e}, nil
	}
	return e, nil
}

// lookupEffect is the effect of one call, as Lookup finds it.
type lookupEffect[In, Out any] struct {
	c    *core[In, Out]
	sent Sent
	in   In
}

// Key is LookupKey's line, or the tool and the operation id.
func (e lookupEffect[In, Out]) Key() string {
	if e.c.lookupKey != nil {
		return oneLine(e.c.lookupKey(e.in))
	}
	return "the effect of " + e.c.name + " operation " + e.sent.OperationID
}

// Find asks Lookup once.
func (e lookupEffect[In, Out]) Find(ctx context.Context) (Observation, error) {
	return e.c.lookup(ctx, e.sent, e.in)
}

// readBackEffect is a lookupEffect that reads a URL back (ReadBackURL).
type readBackEffect[In, Out any] struct{ lookupEffect[In, Out] }

// ReadBack asks ReadBackURL's function what url names.
func (e readBackEffect[In, Out]) ReadBack(ctx context.Context, url string) (Observation, error) {
	return e.c.readBack(ctx, e.sent, e.in, url)
}

// verifier is the Verifier side (Verify).
type verifier[In, Out any] struct{ c *core[In, Out] }

// Verify reads back whether call took effect.
func (v verifier[In, Out]) Verify(ctx context.Context, call Call) (Result, bool, error) {
	in, err := v.c.parse(call.Arguments)
	if err != nil {
		return Result{}, false, err
	}
	out, landed, err := v.c.verify(ctx, call, in)
	if err != nil || !landed {
		return Result{}, false, err
	}
	return v.c.result(out), true, nil
}

// guarded is the Guarded side (Breaker).
type guarded[In, Out any] struct{ c *core[In, Out] }

// Breaker is the key Breaker gave.
func (g guarded[In, Out]) Breaker() string { return g.c.breaker }

// targeted is the Targeted side (Targets).
type targeted[In, Out any] struct{ c *core[In, Out] }

// Target parses args and names what they act on.
func (t targeted[In, Out]) Target(args json.RawMessage) (Target, error) {
	in, err := t.c.parse(args)
	if err != nil {
		return Target{}, err
	}
	return t.c.targets(in), nil
}

// preparer is the Preparer side (Prepare).
type preparer[In, Out any] struct{ c *core[In, Out] }

// Prepare reads the facts the lookup will need.
func (p preparer[In, Out]) Prepare(ctx context.Context, call Call) (json.RawMessage, error) {
	in, err := p.c.parse(call.Arguments)
	if err != nil {
		return nil, err
	}
	return p.c.prepare(ctx, call, in)
}

// approver is the ApprovalTexter side (ApprovalText).
type approver[In, Out any] struct{ c *core[In, Out] }

// ApprovalText is ApprovalText's line, "" for arguments that do not parse.
func (a approver[In, Out]) ApprovalText(args json.RawMessage) string {
	in, err := a.c.parse(args)
	if err != nil {
		return ""
	}
	return oneLine(a.c.approval(in))
}
