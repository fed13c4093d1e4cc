package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
)

// --fallback is repeatable and validated like --model; --persistent goes
// into the task's input.
func TestRunFlagsFallbacksAndPersistent(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(string) string { return "" })}
	cmd := a.runCommand()
	if err := cmd.ParseFlags([]string{"--fallback", "sandbox:demo", "--fallback", "openai:gpt-y", "--persistent"}); err != nil {
		t.Fatal(err)
	}
	fallbacks, err := cmd.Flags().GetStringArray("fallback")
	if err != nil || !slices.Equal(fallbacks, []string{"sandbox:demo", "openai:gpt-y"}) {
		t.Fatalf("--fallback twice = %v, %v", fallbacks, err)
	}
	f := runFlags{prompt: "p", base: "main", tenant: "default", model: "openai:m", maxTurns: 3,
		humanTimeout: config.DefaultHumanTimeout, fallbacks: fallbacks, persistent: true}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.Fallbacks, fallbacks) || !in.Persistent {
		t.Errorf("input fallbacks, persistent = %v, %v; want %v, true", in.Fallbacks, in.Persistent, fallbacks)
	}
	for _, bad := range [][]string{{"claude-x"}, {"openai:m"}, {"openai:a", "openai:a"}} {
		f.fallbacks = bad
		if _, err := a.taskInput(f); err == nil || !strings.Contains(err.Error(), "--fallback") {
			t.Errorf("--fallback %v: error %v, want a usage error naming --fallback", bad, err)
		}
	}
}
