package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/tool"
)

// schemaHashed is a tool whose input schema its server may change under a
// running task (an MCP tool): it says which schema it has now.
type schemaHashed interface {
	// SchemaHash is the hash of the schema the tool has now; "" when the
	// tool is gone.
	SchemaHash() string
}

// toolServer is the MCP server t comes from, for the policy's "server";
// "" for a built-in tool.
func toolServer(t tool.Tool) string {
	if s, ok := t.(interface{ Server() string }); ok {
		return s.Server()
	}
	return ""
}

// schemaHash is t's schema hash, "" for a tool whose schema cannot change.
func schemaHash(t tool.Tool) string {
	if h, ok := t.(schemaHashed); ok {
		return h.SchemaHash()
	}
	return ""
}

// toolPins are the registered tools whose schema may change (MCP tools),
// by name, each with the hash of its schema now; a tool whose schema
// cannot be read now (gone, or not compiling) is left out.
func (a *Activities) toolPins() []contract.ToolPin {
	var pins []contract.ToolPin
	if a.Tools == nil {
		return nil
	}
	for _, name := range a.Tools.Names() {
		t, _ := a.Tools.Get(name) // a name the registry lists
		if h := schemaHash(t); h != "" {
			pins = append(pins, contract.ToolPin{Name: name, SchemaHash: h})
		}
	}
	return pins
}

// pinnedOffer keeps, of specs, the built-in tools and the tools with
// changeable schemas that set fixes for the task; a nil set keeps all.
func (a *Activities) pinnedOffer(specs []model.ToolSpec, set *contract.ToolSet) []model.ToolSpec {
	if set == nil {
		return specs
	}
	out := specs[:0:0]
	for _, s := range specs {
		t, err := a.Tools.Get(s.Name)
		if _, pinned := set.Pin(s.Name); err == nil && (pinned || !isSchemaHashed(t)) {
			out = append(out, s)
		}
	}
	return out
}

func isSchemaHashed(t tool.Tool) bool {
	_, ok := t.(schemaHashed)
	return ok
}

// callSchemaHash is the schema hash a call of t records in its turn: the
// one the task fixed for it, else the tool's own now ("" for a tool whose
// schema cannot change).
func callSchemaHash(t tool.Tool, set *contract.ToolSet) string {
	if !isSchemaHashed(t) {
		return ""
	}
	if set != nil {
		if p, ok := set.Pin(t.Name()); ok {
			return p.SchemaHash
		}
		return notFixed
	}
	return schemaHash(t)
}

// drifted reports a tool whose schema may change and is not, now, the one
// the task fixed: not fixed at all, gone, or with another schema. A nil set
// (no fixed set) drifts nothing.
func drifted(t tool.Tool, set *contract.ToolSet) bool {
	if set == nil || !isSchemaHashed(t) {
		return false
	}
	p, ok := set.Pin(t.Name())
	return !ok || p.SchemaHash != schemaHash(t)
}

// notFixed is the schema hash a call records of a tool the task did not
// fix at its start: ExecuteTool refuses it.
const notFixed = "not-fixed-for-this-task"

// ErrSchemaChanged reports a call of a tool whose input schema changed
// since the model was offered it: nothing was sent.
var ErrSchemaChanged = errors.New("the tool's input schema changed since the task started or the model called it")

// schemaKept checks, for a tool whose schema may change, that it is the
// schema the model was offered when it made the call — recorded with the
// committed turn (contract.ToolCallRef.SchemaHash) — so that arguments meant
// for one shape are never sent to another. Its error, wrapping
// tool.ErrRefused, is a refusal the model reads. A turn that recorded no
// hash (a built-in tool, or a turn committed before hashes were recorded)
// passes.
func (a *Activities) schemaKept(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool) error {
	h, ok := impl.(schemaHashed)
	if !ok {
		return nil
	}
	data, err := a.Ledger.GetTurn(ctx, in.TurnID)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read turn %s for the schema its call of %s was made against: %w", in.TurnID, in.Tool, err)
	}
	var turn contract.ModelTurnResult
	if err := json.Unmarshal(data, &turn); err != nil {
		return fmt.Errorf("decode committed turn %s: %w", in.TurnID, err)
	}
	for _, c := range turn.ToolCalls {
		if c.ID != in.ToolCallID || c.SchemaHash == "" {
			continue
		}
		switch now := h.SchemaHash(); {
		case c.SchemaHash == notFixed:
			return fmt.Errorf("%w: %s was not among the tools fixed when this task started; nothing was sent", tool.ErrRefused, in.Tool)
		case now == "":
			return fmt.Errorf("%w: %s is no longer offered by its server; nothing was sent", tool.ErrRefused, in.Tool)
		case now != c.SchemaHash:
			return fmt.Errorf("%w: %w (schema %s when called, %s now); nothing was sent: read the tool's current schema and call it again",
				tool.ErrRefused, ErrSchemaChanged, c.SchemaHash, now)
		}
	}
	return nil
}
