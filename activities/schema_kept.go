package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/tools"
)

// schemaHashed is a tool whose input schema its server may change under a
// running task (an MCP tool): it says which schema it has now.
type schemaHashed interface {
	// SchemaHash is the hash of the schema the tool has now; "" when the
	// tool is gone.
	SchemaHash() string
}

// schemaHash is t's schema hash, "" for a tool whose schema cannot change.
func schemaHash(t tools.Tool) string {
	if h, ok := t.(schemaHashed); ok {
		return h.SchemaHash()
	}
	return ""
}

// ErrSchemaChanged reports a call of a tool whose input schema changed
// since the model was offered it: nothing was sent.
var ErrSchemaChanged = errors.New("the tool's input schema changed since the model called it")

// schemaKept checks, for a tool whose schema may change, that it is the
// schema the model was offered when it made the call — recorded with the
// committed turn (contract.ToolCallRef.SchemaHash) — so that arguments meant
// for one shape are never sent to another. Its error, wrapping
// tools.ErrRefused, is a refusal the model reads. A turn that recorded no
// hash (a built-in tool, or a turn committed before hashes were recorded)
// passes.
func (a *Activities) schemaKept(ctx context.Context, in contract.ExecuteToolInput, tool tools.Tool) error {
	h, ok := tool.(schemaHashed)
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
		case now == "":
			return fmt.Errorf("%w: %s is no longer offered by its server; nothing was sent", tools.ErrRefused, in.Tool)
		case now != c.SchemaHash:
			return fmt.Errorf("%w: %w (schema %s when called, %s now); nothing was sent: read the tool's current schema and call it again",
				tools.ErrRefused, ErrSchemaChanged, c.SchemaHash, now)
		}
	}
	return nil
}
