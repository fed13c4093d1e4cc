// Package tools defines the tools an agent may call, the safety class of each
// (DESIGN §5.1), and the built-in GitHub tools. A tool knows how to validate
// its arguments, how to name the effect it would have (business key and the
// fields that define it), and how to perform it once.
//
// Identify must be a pure function of the arguments: the workflow calls it to
// derive operation ids, so it must be deterministic and do no I/O.
package tools

import (
	"context"
	"encoding/json"
	"errors"
)

// Class is a tool's safety class: what may be done after a timeout or an
// ambiguous failure.
type Class string

const (
	// ReadOnly tools have no effect; retry freely, bounded, with jitter.
	ReadOnly Class = "read_only"
	// Idempotent tools may be repeated with the same operation id.
	Idempotent Class = "idempotent"
	// Conditional tools are reconciled by business key and only created when
	// confirmed absent.
	Conditional Class = "conditional"
	// Unsafe tools are reconciled by an embedded marker; if that cannot tell,
	// a person decides.
	Unsafe Class = "unsafe"
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
	OperationID string
	Arguments   json.RawMessage
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
	Name() string
	Description() string
	// Schema is the JSON Schema of the arguments object.
	Schema() map[string]any
	Class() Class
	// Identify validates the arguments and names their effect. It returns an
	// error wrapping ErrInvalidArguments for bad arguments.
	Identify(args json.RawMessage) (Identity, error)
	// Execute performs the call once. Errors are classified with Classify.
	Execute(ctx context.Context, call Call) (Result, error)
}

// ErrInvalidArguments reports arguments that do not satisfy a tool's schema.
var ErrInvalidArguments = errors.New("invalid tool arguments")

// ErrUnknownTool reports a call to a tool that is not registered.
var ErrUnknownTool = errors.New("unknown tool")
