package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/tool"
)

var stubSchema = tool.MustSchema(map[string]any{"type": "object"})

// stubTool is a minimal Tool for registry tests.
type stubTool struct{ name string }

func (s stubTool) Name() string                   { return s.name }
func (s stubTool) Description() string            { return "stub " + s.name }
func (s stubTool) Schema() *tool.Schema           { return stubSchema }
func (s stubTool) Class() tool.Class              { return tool.ReadOnly }
func (s stubTool) Summary(json.RawMessage) string { return s.name }
func (s stubTool) Identify(json.RawMessage) (tool.Identity, error) {
	return tool.Identity{Effect: []byte(`{}`)}, nil
}
func (s stubTool) Execute(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{Output: json.RawMessage(`{}`)}, nil
}

func TestRegistry(t *testing.T) {
	r := tool.NewRegistry(stubTool{"zeta"}, stubTool{"alpha"}, stubTool{"mid"})
	if got := r.Names(); !slices.Equal(got, []string{"alpha", "mid", "zeta"}) {
		t.Errorf("Names = %v", got)
	}
	r.Names()[0] = "mutated"
	if r.Names()[0] != "alpha" {
		t.Error("Names returns shared state")
	}
	specs := r.Specs()
	if len(specs) != 3 || specs[0].Name != "alpha" || specs[2].Name != "zeta" || specs[0].Description != "stub alpha" || specs[0].Parameters["type"] != "object" {
		t.Errorf("Specs = %+v", specs)
	}
	if impl, err := r.Get("mid"); err != nil || impl.Name() != "mid" {
		t.Errorf("Get(mid) = %v, %v", impl, err)
	}
	_, err := r.Get("github_delete_repo")
	if !errors.Is(err, tool.ErrUnknownTool) || !strings.Contains(err.Error(), "github_delete_repo") {
		t.Errorf("Get(unknown) err = %v", err)
	}
	if tool.Classify(err) != tool.VerdictFailed {
		t.Errorf("unknown tool classifies as %q", tool.Classify(err))
	}
}

func TestRegistryPanicsOnDuplicateName(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), `"dup"`) {
			t.Errorf("recover() = %v, want a panic naming the tool", p)
		}
	}()
	tool.NewRegistry(stubTool{"dup"}, stubTool{"other"}, stubTool{"dup"})
}
