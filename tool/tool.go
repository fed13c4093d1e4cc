package tool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/capstanhq/capstan"
)

// Class is a tool's safety class: what may be done after a timeout or an
// ambiguous failure. It is capstan's vocabulary (capstan.Class), which the
// workflow reads without importing the tools.
type Class = capstan.Class

// The safety classes (capstan.ClassReadOnly, …). Their words are stable.
const (
	// ReadOnly: the tool has no effect. A call whose answer was lost is
	// retried, bounded.
	ReadOnly = capstan.ClassReadOnly
	// Idempotent: a call may be repeated with the same operation id to
	// the same effect. After an ambiguous failure it is read back when
	// the tool is a Verifier, else sent again.
	Idempotent = capstan.ClassIdempotent
	// Conditional: the service keeps one effect per business key. A call
	// whose answer was lost is unknown until its lookup (Finder) finds
	// the effect or sees none through the consistency window.
	Conditional = capstan.ClassConditional
	// Unsafe: a call repeated makes a second effect. A call whose answer
	// was lost is unknown until its lookup finds the operation's mark;
	// when nothing can tell, a person decides. It is never sent again on
	// a guess.
	Unsafe = capstan.ClassUnsafe
)

// Identity names the effect a call would have.
type Identity struct {
	// BusinessKey identifies the effect in the external system, e.g.
	// "pr:create:acme/payments:agent/fix:main". Empty when the tool has none.
	BusinessKey string
	// Effect is a canonical encoding of the arguments that define the effect
	// (for a pull request: repo, head, base — not the title). The ledger
	// stores its hash; the same operation id with another hash is a conflict.
	Effect []byte
}

// Call is one execution request.
type Call struct {
	// OperationID names the call's effect: the same id for every attempt
	// of the same call, recorded in the ledger before anything is sent. A
	// tool that can lose an answer puts it in its request — a field, a
	// header, a marker in a body, an idempotency key — so that its lookup
	// (Finder) can find the effect by it.
	OperationID string
	// Arguments is the arguments object as the model gave it, which
	// Identify accepted.
	Arguments json.RawMessage
	// Facts are what the tool's Prepare recorded for this attempt just
	// before the request was sent (ledger.Operation.Facts): Execute acts on
	// them — a branch is created at the commit recorded, not at one read
	// again — so the effect is the one a lookup given the same facts looks
	// for. Nil when none were recorded (the tool is no Preparer, recorded
	// nothing, or the operation was sent before it recorded facts).
	Facts json.RawMessage
}

// Result is what a successful call produced.
type Result struct {
	// Output is the JSON document given back to the model.
	Output json.RawMessage
	// ExternalID names what was created or changed (a ref, a PR URL, a blob
	// sha); empty for read-only tools.
	ExternalID string
}

// Tool is one callable tool.
type Tool interface {
	// Name is what the model calls the tool, and the kind the ledger
	// records its operations under. It never changes.
	Name() string
	// Description is what the model is told the tool does.
	Description() string
	// Schema is the compiled JSON Schema of the arguments object. Identify
	// and Execute reject every arguments object it rejects, so the schema a
	// model is shown is the one its calls are held to.
	Schema() *Schema
	// Class is the tool's safety class: what may be done after a call's
	// answer was lost.
	Class() Class
	// Identify validates the arguments and names their effect. It returns an
	// error wrapping ErrInvalidArguments for bad arguments.
	Identify(args json.RawMessage) (Identity, error)
	// Summary describes a call in one short line for people, e.g. the
	// Temporal UI's activity summary "create_pull_request acme/payments
	// agent/fix → main". It is meant for arguments Identify accepts; for
	// others it still returns something short, never an error.
	Summary(args json.RawMessage) string
	// Execute performs the call once. Errors are classified with Classify;
	// a tool that knows what its service's answers mean marks its errors
	// with WithVerdict.
	Execute(ctx context.Context, call Call) (Result, error)
}

// Preparer is implemented by a tool whose lookup (Finder) needs facts about
// the world as they stood just before the request was sent — the commit a
// pull request's head branch was at, say — because the effect itself does
// not keep them. ExecuteTool calls Prepare once per attempt, after the claim
// and before the operation is marked RUNNING, and the ledger keeps the facts
// with the operation (ledger.Operation.Facts); they reach Execute as
// Call.Facts, and the lookup as Sent.Facts if the answer to the request is
// lost.
type Preparer interface {
	// Prepare reads, and never changes, what call's lookup will need,
	// and returns it as a JSON document; nil when there is nothing worth
	// recording. An error means the facts could not be read: nothing has
	// been sent, the claim is released, and the call is retried.
	Prepare(ctx context.Context, call Call) (json.RawMessage, error)
}

// ErrInvalidArguments reports arguments that do not satisfy a tool's schema.
var ErrInvalidArguments = errors.New("invalid tool arguments")

// ErrUnknownTool reports a call to a tool that is not registered.
var ErrUnknownTool = errors.New("unknown tool")

// ErrRefused reports a call a tool refused on its own before sending its
// effect: no client configured, no operation id to reconcile by, a write the
// target cannot take. Nothing happened, and repeating the call fails again.
var ErrRefused = errors.New("refused")

// Guarded is implemented by a tool whose calls go through a breaker it
// names itself — an MCP tool's is its server's, "mcp/<server>" — rather
// than the one its name and class give ("<service>/read", "<service>/write").
type Guarded interface {
	// Breaker is the key of the breaker every call of the tool goes
	// through.
	Breaker() string
}
