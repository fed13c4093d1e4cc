// Package tool defines what every tool an agent may call has in common,
// whatever system it acts on: the Tool interface, the safety class of each
// tool (docs/design.md §5.1), the registry, the compiled schema of a tool's
// arguments, the verdict of a failed call (Classify), and the optional sides
// a tool may have — how its effect is found again (Finder, Effect,
// ReadBack, Settler), read back (Verifier), prepared for (Preparer), guarded
// (Guarded), aimed (Targeted) and described to a person asked to approve it
// (ApprovalTexter). It depends on no external system; capstan's own tools
// (GitHub, Slack) are built on it, and so is a tool of yours.
//
// A tool knows how to validate its arguments, how to name the effect it would
// have (business key and the fields that define it), how to describe a call
// in one line, and how to perform it once; a tool whose unknown outcome must
// be reconciled also knows how its effect is found again (Finder).
// All of that is the tool's: its arguments are parsed by its own parser and
// nothing else reads them. Identify must be a pure function of the
// arguments: its result derives operation ids, so it must be deterministic
// and do no I/O.
//
// # Your own tool
//
// New makes a Tool from a Go function and the type of its arguments: the
// JSON Schema a model is shown is derived from that type, and every call is
// held to it. Options give the tool the sides above, each only when asked
// for, since capstan tests for them (a tool with Lookup is a Finder, one
// without is not):
//
//	create, err := tool.New("tickets_create", tool.Unsafe, createTicket,
//		tool.Description("Open a ticket."),
//		tool.Lookup(findTicketByOperationID))
//
// The call's operation id (Call.OperationID) is what such a tool puts in its
// request — a header, a field, a marker in a body — so that its lookup can
// find the effect again when the answer to the request was lost.
//
// # Stability
//
// The API is v0: it may change between minor versions while capstan is
// used as a library by its first users. What may change: the names and the
// signatures of New's options, and the optional interfaces, which may gain
// methods (a tool made by New gains them with them). What will not: the
// words of Class (read_only, idempotent, conditional, unsafe) and what they
// allow after an ambiguous failure, and what an operation id means — one
// id per effect, given to every attempt of the same call, recorded before
// anything is sent.
package tool
