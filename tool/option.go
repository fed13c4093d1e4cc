package tool

import (
	"context"
	"encoding/json"
)

// Option gives a tool made by New something more than its function: a
// description, how its effect is named, found, read back or aimed. Each
// option that takes a function of the tool's arguments (In) or result
// (Out) must be given a function of the very types New is instantiated
// with; New refuses any other with one sentence. An option may be given
// once.
type Option struct {
	name  string // the option's function name, for New's errors
	value any    // a string, or a function of In or Out
}

// Description is what the model is told the tool does. Without it the
// description is empty.
func Description(text string) Option { return Option{name: "Description", value: text} }

// BusinessKey names the effect of a call in the external system from its
// arguments (Identity.BusinessKey), e.g. "ticket:create:OPS:<title>": calls
// with the same key are the same effect. Without it a call has no business
// key. key must be pure: no I/O, the same key for the same arguments.
func BusinessKey[In any](key func(in In) string) Option {
	return Option{name: "BusinessKey", value: key}
}

// EffectOf picks the arguments that define a call's effect (Identity.Effect
// is their canonical JSON): a call repeated under one operation id with
// other such arguments is a conflict, while a change in the others (a
// title, say) is not. Without it the effect is all of the arguments. of
// must be pure and its result encodable as JSON.
func EffectOf[In any](of func(in In) any) Option {
	return Option{name: "EffectOf", value: of}
}

// Lookup makes the tool a Finder: after the answer to a call was lost, the
// reconciler asks find, within the consistency window, whether the call's
// effect is there. find gets the call as it was sent (Sent: its operation
// id, arguments, facts and the time of its claim) and its arguments
// decoded. It answers Found (with the ExternalID Execute would have
// recorded), NotSeen, or Ambiguous; an error means it could not ask, never
// that the effect is absent. find must never perform the effect.
//
// A conditional or unsafe tool without Lookup is allowed: the reconciler
// then cannot look, and every unknown outcome of the tool waits for a
// person (`starter resolve`); nothing is sent again before they answer.
func Lookup[In any](find func(ctx context.Context, s Sent, in In) (Observation, error)) Option {
	return Option{name: "Lookup", value: find}
}

// LookupKey says in one line for people what the lookup looks for
// (Effect.Key), shown while a reconciliation runs: "a ticket in OPS
// carrying operation id …". Without it the key names the tool and the
// operation id. It needs Lookup.
func LookupKey[In any](key func(in In) string) Option {
	return Option{name: "LookupKey", value: key}
}

// ReadBackURL lets a person's "found it, here" be checked: the tool's
// effects implement ReadBack, and `starter resolve --found URL` accepts the
// URL only when read answers Found for it, with ExternalID in the form
// Execute records. It needs Lookup. (The option cannot be named ReadBack:
// that is the interface it gives.)
func ReadBackURL[In any](read func(ctx context.Context, s Sent, in In, url string) (Observation, error)) Option {
	return Option{name: "ReadBackURL", value: read}
}

// ExternalID names what a successful call created or changed
// (Result.ExternalID), from its result: a URL, an id. Without it
// ExternalID is empty.
func ExternalID[Out any](id func(out Out) string) Option {
	return Option{name: "ExternalID", value: id}
}

// Breaker makes the tool Guarded: its calls go through the circuit breaker
// named key (e.g. "tickets/write") instead of the one its name and class
// give ("<first word of the name>/read" or "/write").
func Breaker(key string) Option { return Option{name: "Breaker", value: key} }

// Summary describes a call in one short line for people (Tool.Summary):
// the Temporal UI's activity summary, the operation list. Without it the
// summary is the tool's name, followed by the business key when the tool
// has one. A summary is cut to one line of at most 200 characters.
func Summary[In any](describe func(in In) string) Option {
	return Option{name: "Summary", value: describe}
}

// ApprovalText makes the tool an ApprovalTexter: text is the one line a
// person asked to approve a call reads (the Slack notice, `starter
// status`, the Temporal UI), e.g. "open a P1 ticket in OPS: disk full on
// db-3". The call itself is shown beside it, whole, with its hash; text
// only says what it means. It is cut like Summary.
func ApprovalText[In any](text func(in In) string) Option {
	return Option{name: "ApprovalText", value: text}
}

// Targets makes the tool Targeted: what a call acts on, as the task's
// policy sees it. Besides the GitHub fields (Repository, Branch, Path…), a
// tool gives rules its own attributes (Target.Attributes), which a policy
// rule reads as `attributes["project"]`. target must be pure.
func Targets[In any](target func(in In) Target) Option {
	return Option{name: "Targets", value: target}
}

// Verify makes the tool a Verifier: after an ambiguous failure of a call,
// read reads what it would have changed and says whether it is in place
// (landed, with the result Execute would have returned) or provably not
// (then the call is sent again). An error means it could not tell. Only an
// idempotent tool is read back, so New refuses Verify on any other class.
func Verify[In, Out any](read func(ctx context.Context, call Call, in In) (out Out, landed bool, err error)) Option {
	return Option{name: "Verify", value: read}
}

// Prepare makes the tool a Preparer: once per attempt, before the request
// is sent, prepare reads (and never changes) the facts the lookup will
// need, as a JSON document the ledger keeps with the operation; they reach
// the tool's function as Call.Facts and the lookup as Sent.Facts. nil
// records nothing. An error sends nothing, and the call is retried.
func Prepare[In any](prepare func(ctx context.Context, call Call, in In) (json.RawMessage, error)) Option {
	return Option{name: "Prepare", value: prepare}
}
