package tool

import (
	"fmt"
	"sort"
)

// Registry is a fixed set of tools, looked up by name. It is immutable after
// NewRegistry, so it is safe for concurrent use.
type Registry struct {
	byName map[string]Tool
	names  []string // sorted
}

// NewRegistry returns a registry of ts. Two tools with the same name are a
// programming error, so it panics rather than let one shadow the other.
func NewRegistry(ts ...Tool) *Registry {
	r := &Registry{byName: make(map[string]Tool, len(ts))}
	for _, t := range ts {
		name := t.Name()
		if _, dup := r.byName[name]; dup {
			panic(fmt.Sprintf("tools: duplicate tool name %q", name))
		}
		r.byName[name] = t
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)
	return r
}

// Get returns the tool called name, or an error wrapping ErrUnknownTool.
func (r *Registry) Get(name string) (Tool, error) {
	if t, ok := r.byName[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string {
	return append([]string(nil), r.names...)
}

// Spec is how a model is shown one tool: its name, what it does, and the
// JSON Schema of its arguments object.
type Spec struct {
	// Name is the tool's name (Tool.Name).
	Name string `json:"name"`
	// Description is what the tool does (Tool.Description).
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments object (Schema.Doc).
	Parameters map[string]any `json:"parameters"`
}

// Specs describes the tools for a model request, sorted by name so the
// request (and any prompt cache keyed on it) is the same on every run.
func (r *Registry) Specs() []Spec {
	specs := make([]Spec, 0, len(r.names))
	for _, name := range r.names {
		t := r.byName[name]
		specs = append(specs, Spec{Name: name, Description: t.Description(), Parameters: t.Schema().Doc()})
	}
	return specs
}
