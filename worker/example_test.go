package worker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// A worker refuses a configuration it cannot serve with one sentence,
// before it opens, dials or starts anything: here, no model provider key.
// A real program leaves LookupEnv nil (the process's environment) or
// overlays its own settings on it.
func ExampleNew() {
	env := map[string]string{"GITHUB_TOKEN": "ghp-example"}
	_, err := worker.New(context.Background(), worker.Options{
		TaskQueue: "tickets",
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	fmt.Println(err)
	// Output: no model provider has a key: OPENAI_API_KEY is not set (any value for a local server that needs none), nor is ANTHROPIC_API_KEY; set one (or, offline, point the worker at the sandbox program: make demo)
}

// A tool whose name a built-in tool has is refused before anything is
// opened, with ErrDuplicateTool (newTicketTool is a tool.Tool of this
// package's tests: see tools_test.go).
func ExampleOptions_tools() {
	env := map[string]string{"GITHUB_TOKEN": "ghp-example", "OPENAI_API_KEY": "sk-example"}
	_, err := worker.New(context.Background(), worker.Options{
		Tools:     []tool.Tool{newTicketTool("github_comment")},
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	fmt.Println(errors.Is(err, worker.ErrDuplicateTool))
	// Output: true
}
