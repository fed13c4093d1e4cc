package tool

import (
	"context"
	"errors"
	"time"

	"github.com/capstanhq/capstan"
)

// This file is what a tool says about finding its effect again when the
// answer to its call was lost (docs/design.md §5.5): the tool parses the
// call's arguments, with the same parser its Execute uses, into an Effect —
// the mark the call leaves and the lookup that finds it. Package reconcilers
// runs the lookup, over any tool that is a Finder, within the consistency
// window, and turns what it sees into a verdict.

// Outcome is what one lookup of an effect saw: a verdict of capstan's one
// vocabulary, drawn from one answer.
type Outcome = capstan.Verdict

const (
	// Found: exactly one effect of the operation exists.
	Found = capstan.VerdictFound
	// NotSeen: the system answered and showed no effect of the operation.
	// It may still be catching up; only the reconciler's consistency
	// window turns this into "absent".
	NotSeen = capstan.VerdictNotYet
	// Ambiguous: the answer cannot be read either way — several effects
	// carry the operation's mark, or something exists that may or may not
	// be the operation's. A person must decide.
	Ambiguous = capstan.VerdictIndeterminate
)

// Observation is the answer to one lookup.
type Observation struct {
	// Outcome is what the lookup saw: Found, NotSeen or Ambiguous.
	Outcome Outcome
	// ExternalID names the effect when Found, in the form Execute records
	// it on success (Result.ExternalID): a pull request or comment URL,
	// "refs/heads/<b>@<sha>", a blob SHA, "<channel>/<ts>".
	ExternalID string
	// Detail says in one sentence what was asked and what was seen.
	Detail string
}

// Sent is a call whose answer may have been lost, with what its lookup may
// need besides the arguments and the facts recorded before it was sent
// (Call.Facts).
type Sent struct {
	Call
	// Since is when the operation was first claimed, by the ledger's
	// clock: its effect cannot be older. A lookup that lists what a system
	// holds since then starts ClockMargin earlier.
	Since time.Time
}

// Effect is what a call leaves in an external system, as its tool knows it.
type Effect interface {
	// Key names, in one line for people, what the effect leaves that tells
	// it apart and that Find looks for: "branch agent/fix of acme/app, at
	// the commit main is at", "a comment on acme/app#7 carrying
	// <!-- capstan-op: … -->".
	Key() string
	// Find asks the external system once whether the effect is there. An
	// error means the question could not be asked — a rate limit, a 5xx, a
	// dropped connection — and says nothing about the effect: it is never
	// NotSeen. Find never performs the effect.
	Find(ctx context.Context) (Observation, error)
}

// Finder is implemented by a tool whose effect can be found again after the
// answer to its call was lost — every conditional and unsafe tool, since
// only a lookup may settle their unknown outcomes — and by a delivery.
type Finder interface {
	// Effect reads the effect s would leave, parsing s.Arguments with the
	// tool's own parser. It does no I/O. Its error wraps ErrNotConfigured
	// when this worker lacks the client the lookup needs; any other error
	// means no question can be formed from s (arguments or facts that do
	// not parse, no operation id to find a marker by), and asking again
	// cannot help.
	Effect(s Sent) (Effect, error)
}

// ErrNotConfigured reports a lookup this worker cannot make: the client it
// needs is not configured.
var ErrNotConfigured = errors.New("the client is not configured on this worker")

// ClockMargin widens "since the claim" in the lookups that list what a
// system holds (docs/design.md §5.5): the claim time is the ledger's clock
// (PostgreSQL's, or the SQLite machine's), the effect's time the remote
// system's (GitHub's, Slack's), and the margin covers how far those two may
// disagree, so an effect stamped a little before the claim by a clock that
// runs behind is still listed.
const ClockMargin = 2 * time.Minute

// ReadBack is implemented by an Effect whose tool can read back the URL a
// person says names it (`starter resolve --found URL`), so that no URL is
// accepted that is not an effect of the operation's kind, in its
// repository (or channel), as it exists now.
type ReadBack interface {
	// ReadBack parses url with the tool's own rules and asks the external
	// system for what it names. Found, with ExternalID in the form Execute
	// records, is the effect; any other Outcome refuses the URL, Detail
	// saying why in one sentence (not this kind of effect, another
	// repository, nothing there). An error means the question could not be
	// asked, and says nothing about the URL.
	ReadBack(ctx context.Context, url string) (Observation, error)
}

// Settler is implemented by an Effect whose service cannot hold a second
// effect for the operation's key: GitHub refuses a second open pull
// request for a head and base, and a second branch of a name. For such an
// effect a lookup that saw nothing need not wait out the consistency
// window: sending the call again, with the same operation id, either makes
// the one effect (the first send did not) or is refused because it exists
// (the first send did, and the lookup lagged behind it), and the refusal is
// read back and checked.
type Settler interface {
	Effect
	// Settle sends the call again, once, and says what became of it. It is
	// asked only after Find answered NotSeen. Found, with ExternalID in the
	// form Execute records, is the effect: made now, or refused as already
	// there and read back as the operation's. Ambiguous: refused, and what
	// is there cannot be told the operation's. An error says nothing about
	// the effect — the request failed with its outcome unknown, it was
	// refused for another reason, or what refused it could not be read
	// back yet — and the caller goes on looking within the window, as for
	// an effect without that guarantee.
	Settle(ctx context.Context) (Observation, error)
}
