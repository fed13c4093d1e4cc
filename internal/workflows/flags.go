package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// AttrFlags holds what a task waits for or gave up on, one value per
// Flag (docs/design.md §9.2): a KeywordList, so that capstan takes one
// attribute of a type SQL visibility allows three of per namespace, where
// it took all three Bools before changeSearchFlags.
var AttrFlags = temporal.NewSearchAttributeKeyKeywordList("CapstanFlags")

// A Flag is one value of AttrFlags.
type Flag string

// The flags, with the Bool attribute that said each before
// changeSearchFlags (LegacyFlagAttribute).
const (
	// FlagNeedsHuman: an operation waits for a person to resolve it
	// (was CapstanNeedsHuman = true); cleared when no operation does.
	FlagNeedsHuman Flag = "needs_human"
	// FlagAwaitingApproval: an operation waits for a person's approval
	// (was CapstanAwaitingApproval = true); cleared when none does.
	FlagAwaitingApproval Flag = "awaiting_approval"
	// FlagDeadLetter: a delivery was given up (was CapstanDeadLetter =
	// true); never cleared.
	FlagDeadLetter Flag = "dead_letter"
)

// Flags are every flag, in the order AttrFlags lists them.
var Flags = []Flag{FlagNeedsHuman, FlagAwaitingApproval, FlagDeadLetter}

// LegacyFlagAttribute is the Bool search attribute that said f before
// changeSearchFlags: a task started before still sets it (on replay and
// to its end), so readers of f look at both while such a task may exist
// (FlagQuery). Workers no longer register them; a namespace that has them
// keeps them.
func LegacyFlagAttribute(f Flag) temporal.SearchAttributeKeyBool {
	switch f {
	case FlagNeedsHuman:
		return AttrNeedsHuman
	case FlagAwaitingApproval:
		return AttrAwaitingApproval
	default:
		return AttrDeadLetter
	}
}

// LegacySearchAttributes are the Bool attributes tasks set before
// changeSearchFlags, no longer in SearchAttributes.
var LegacySearchAttributes = []temporal.SearchAttributeKey{AttrNeedsHuman, AttrDeadLetter, AttrAwaitingApproval}

// FlagQuery is the visibility filter of the tasks that carry f: on
// CapstanFlags and, with legacy (the namespace defines f's Bool, so tasks
// started before changeSearchFlags may set it), on that Bool too. A
// filter naming an attribute the namespace does not define is refused by
// the server, so legacy must be false where the Bool is not registered.
func FlagQuery(f Flag, legacy bool) string {
	q := fmt.Sprintf("%s = '%s'", AttrFlags.GetName(), f)
	if legacy {
		q = fmt.Sprintf("(%s OR %s = true)", q, LegacyFlagAttribute(f).GetName())
	}
	return q
}

// flagBook is how a run of the task says its flags: undecided until it
// first sets one, then on the Bools (a run that first set one before
// changeSearchFlags) or on AttrFlags, with the flags it holds.
type flagBook struct {
	decided, onList bool
	held            []Flag // in Flags' order
}

// flagsOnList reports whether this run says its flags on AttrFlags,
// deciding it as the run first sets a flag, on changeSearchFlags' own
// marker: a run that set one before the change (no marker in its history)
// keeps setting and clearing the Bools to its end.
func (t *task) flagsOnList(ctx workflow.Context) bool {
	if !t.flags.decided {
		t.flags.decided = true
		t.flags.onList = workflow.GetVersion(ctx, changeSearchFlags, workflow.DefaultVersion, 1) != workflow.DefaultVersion
	}
	return t.flags.onList
}

// flagUpdate is the search-attribute update that turns f on or off,
// recording it in the run's flags: AttrFlags with every flag the run now
// holds (an empty list when none, which the SDK sends as null and the
// server stores as no attribute), or f's Bool for a run on the Bools. Only a run
// that has set a flag may clear one (the mode is decided by then).
func (t *task) flagUpdate(ctx workflow.Context, f Flag, on bool) temporal.SearchAttributeUpdate {
	if !t.flagsOnList(ctx) {
		return LegacyFlagAttribute(f).ValueSet(on)
	}
	held := slices.DeleteFunc(slices.Clone(t.flags.held), func(h Flag) bool { return h == f })
	if on {
		held = append(held, f)
	}
	t.flags.held = slices.DeleteFunc(slices.Clone(Flags), func(g Flag) bool { return !slices.Contains(held, g) })
	vals := make([]string, len(t.flags.held))
	for i, h := range t.flags.held {
		vals[i] = string(h)
	}
	return AttrFlags.ValueSet(vals)
}

// finalFlags are the updates that clear, as the task ends, the flags that
// mean it waits (needs a person, awaits an approval) if this run set one:
// the Bools for a run on them, as before changeSearchFlags; else AttrFlags
// without them, keeping a dead letter.
func (t *task) finalFlags(ctx workflow.Context) []temporal.SearchAttributeUpdate {
	if !t.flags.decided || !t.flags.onList {
		var attrs []temporal.SearchAttributeUpdate
		if t.askedPerson {
			attrs = append(attrs, AttrNeedsHuman.ValueSet(false))
		}
		if t.approval.asked {
			attrs = append(attrs, AttrAwaitingApproval.ValueSet(false))
		}
		return attrs
	}
	if !slices.Contains(t.flags.held, FlagNeedsHuman) && !slices.Contains(t.flags.held, FlagAwaitingApproval) {
		return nil
	}
	t.flagUpdate(ctx, FlagNeedsHuman, false)
	return []temporal.SearchAttributeUpdate{t.flagUpdate(ctx, FlagAwaitingApproval, false)}
}
