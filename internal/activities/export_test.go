package activities

import (
	"context"

	"github.com/capstanhq/capstan/internal/contract"
)

// What the breaker is told of a call's ending, for the tests.
var (
	ToolHealth  = toolHealth
	SlackHealth = slackHealth
	ModelHealth = modelHealth
)

// SegmentItems bounds the items of one transcript manifest link.
const SegmentItems = segmentItems

// ManifestRefs returns the references of the items of the transcript a
// manifest names, walking the chain it builds on.
func (a *Activities) ManifestRefs(ctx context.Context, ref string) ([]string, error) {
	_, refs, err := a.manifestRefs(ctx, ref)
	return refs, err
}

// Decide is the policy's decision on the call of the tool named by
// in.Tool with args, as ExecuteTool makes it, recorded in the ledger by a
// write of its own (RecordDecision), as ExecuteTool records a decision
// that does not let the call through; one that does rides on the claim.
func (a *Activities) Decide(ctx context.Context, in contract.ExecuteToolInput, args []byte) (*contract.PolicyDecision, error) {
	impl, err := a.Tools.Get(in.Tool)
	if err != nil {
		return nil, err
	}
	d, err := a.decide(ctx, in, impl, args)
	if err != nil || d == nil {
		return d, err
	}
	return a.recordDecision(ctx, in, d)
}

// LoadTranscript loads the transcript manifest names, its items' messages
// included, as a turn does, and returns how many items it holds.
func (a *Activities) LoadTranscript(ctx context.Context, manifest string) (int, error) {
	t, _, err := a.loadTranscript(ctx, contract.ModelTurnInput{Transcript: manifest}, &pendingItems{})
	return len(t.refs), err
}

// NewItemCache is the activities' cache of transcript items over l.
func NewItemCache(l Ledger, limit int) Ledger { return newItemCache(l, limit) }

// PinnedOffer and CallSchemaHash are what ModelTurn offers and records of
// the tools a task fixed at its start (changeMCPToolsPinned).
func PinnedOffer(a *Activities, set *contract.ToolSet) []string {
	var names []string
	for _, s := range a.pinnedOffer(a.Tools.Specs(), set) {
		names = append(names, s.Name)
	}
	return names
}

// CallSchemaHash is the schema hash a call of t records in its turn.
var CallSchemaHash = callSchemaHash

// ValidateToolCall is ModelTurn's check of a call as its attempt finishes,
// for a task with the fixed set of tools set.
func ValidateToolCall(a *Activities, set *contract.ToolSet, name string, args []byte) error {
	return a.toolCallValidator(set)(name, args)
}

// HandedOn is handedOn: how a stopping worker reports an attempt's failure.
var HandedOn = handedOn
