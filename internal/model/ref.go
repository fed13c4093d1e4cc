package model

import (
	"fmt"
	"strings"
)

// Providers capstan knows by name. A worker serves the ones it has
// configuration for.
var KnownProviders = []string{"openai", "anthropic", "sandbox"}

// Ref is a parsed "provider:model" string, e.g. "openai:gpt-4.1" or
// "sandbox:demo".
type Ref struct {
	Provider string
	Model    string
}

func (r Ref) String() string { return r.Provider + ":" + r.Model }

// ParseRef parses "provider:model" and checks the provider is known.
func ParseRef(s string) (Ref, error) {
	provider, name, ok := strings.Cut(s, ":")
	if !ok || provider == "" || name == "" {
		return Ref{}, fmt.Errorf("model %q is not of the form PROVIDER:MODEL (for example openai:gpt-4.1, anthropic:claude-sonnet-4-5 or sandbox:demo)", s)
	}
	for _, p := range KnownProviders {
		if p == provider {
			return Ref{Provider: provider, Model: name}, nil
		}
	}
	return Ref{}, fmt.Errorf("unknown model provider %q in %q (known: %s)", provider, s, strings.Join(KnownProviders, ", "))
}
