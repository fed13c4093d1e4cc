package activities_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// A task whose policy names a tool this worker does not have — in a rule's
// tool field or in --require-approval — would fail open: the deny refuses
// nothing, the approval is never asked for. Its first model turn fails it
// worker_misconfigured with one sentence naming the name, before the model
// is asked anything; the same task naming tools the worker has runs.
func TestTaskPolicyNamingAnUnknownToolFailsTheTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seed := []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}
	rule := "rules:\n  - name: no-tickets\n    tool: mcp__tickets__create\n    effect: deny\n    reason: tickets are filed by people\n"
	for i, tc := range []struct {
		name string
		tp   *contract.TaskPolicy
		says string
	}{
		{"a rule", &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", File: "task.yaml", Source: rule},
			`policy file task.yaml, line 3, rule "no-tickets": tool "mcp__tickets__create" matches none of this worker's tools (github_comment, `},
		{"a glob", &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", File: "task.yaml",
			Source: "rules:\n  - name: gitlab\n    tool: gitlab_*\n    effect: require_approval\n"}, `tool "gitlab_*" matches none of this worker's tools`},
		{"--require-approval", &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", RequireApproval: []string{"mcp__tickets__create"}},
			`the task's --require-approval "mcp__tickets__create" names none of this worker's tools (github_comment, `},
	} {
		_, err := f.env.ExecuteActivity(f.acts.ModelTurn, contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1",
			Model: "sandbox:demo", Seed: seed, Policy: tc.tp})
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeWorkerConfig || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%d %s: ModelTurn = %v; want worker_misconfigured saying %q", i, tc.name, err, tc.says)
		}
	}
	if n := f.sb.Model.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests, want none", n)
	}
	ok := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", RequireApproval: []string{"github_comment", "unsafe"},
		File: "task.yaml", Source: "rules:\n  - name: no-comments\n    tool: github_*\n    effect: deny\n    reason: no\n"}
	if _, err := f.env.ExecuteActivity(f.acts.ModelTurn, contract.ModelTurnInput{TaskID: "T2", TurnID: "T2/t1", AttemptID: "T2/t1/a1",
		Model: "sandbox:demo", Seed: seed, Policy: ok}); err != nil {
		t.Errorf("a policy naming tools the worker has: %v", err)
	}
}

// A worker whose own policy file names a tool it does not have does not
// start: activities.New refuses it with the file's one sentence.
func TestWorkerPolicyNamingAnUnknownToolIsRefused(t *testing.T) {
	t.Parallel()
	floor, err := policy.Parse("/etc/capstan/policy.yaml", []byte("rules:\n  - name: no-tickets\n    tool: mcp__tickets__create\n    effect: deny\n    reason: no\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	_, err = activities.New(activities.Deps{Ledger: f.ledger, Tools: tool.NewRegistry(githubtools.Tools(nil)...), Identity: "w", Floor: floor})
	if err == nil || !strings.Contains(err.Error(), `CAPSTAN_POLICY: policy file /etc/capstan/policy.yaml, line 3, rule "no-tickets": tool "mcp__tickets__create" matches none`) {
		t.Errorf("New = %v, want a refusal naming the file, line 3 and the rule", err)
	}
}

// An MCP tool is named in a rule or a --require-approval by the name the
// worker registered it under: one over 64 characters is cut and given a
// hash (mcp.ToolName), so its uncut name, which no tool has, fails the
// task, and the registered one is accepted.
func TestTaskPolicyNamesAnMCPToolByItsRegisteredName(t *testing.T) {
	t.Parallel()
	server := strings.Repeat("tickets", 9)
	srv := mcpserver.StartHTTP(mcpserver.NewStore(), mcpserver.Options{})
	t.Cleanup(srv.Close)
	cfg, err := mcp.Parse("test.json", []byte(fmt.Sprintf(`{"mcpServers": {%q: {"url": %q}}}`, server, srv.URL)),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := mcp.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var registry *tool.Registry
	f := newFixture(t, func(d *activities.Deps) { // the built-in tools and the server's, as a worker has them
		all := pool.Tools()
		for _, name := range d.Tools.Names() {
			impl, _ := d.Tools.Get(name) // a name the registry lists
			all = append(all, impl)
		}
		registry = tool.NewRegistry(all...)
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry)
	})
	full, registered := mcp.Prefix+server+"__create_ticket", mcp.ToolName(server, "create_ticket")
	if _, err := registry.Get(registered); err != nil || len(registered) != 64 || registered == full {
		t.Fatalf("the tool is registered as %q (%v), want a cut and hashed name of 64 characters", registered, err)
	}
	seed := []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}
	rule := func(impl string) string {
		return "rules:\n  - name: no-tickets\n    tool: " + impl + "\n    effect: deny\n    reason: tickets are filed by people\n"
	}
	for i, tc := range []struct {
		name string
		tp   *contract.TaskPolicy
		says string // "" for accepted
	}{
		{"a rule with the uncut name", &contract.TaskPolicy{File: "task.yaml", Source: rule(full)}, `tool "` + full + `" matches none of this worker's tools`},
		{"--require-approval with the uncut name", &contract.TaskPolicy{RequireApproval: []string{full}}, `--require-approval "` + full + `" names none of this worker's tools`},
		{"a rule with the registered name", &contract.TaskPolicy{File: "task.yaml", Source: rule(registered)}, ""},
		{"--require-approval with the registered name", &contract.TaskPolicy{RequireApproval: []string{registered}}, ""},
	} {
		id := fmt.Sprintf("T%d", i)
		_, err := f.env.ExecuteActivity(f.acts.ModelTurn, contract.ModelTurnInput{TaskID: id, TurnID: id + "/t1", AttemptID: id + "/t1/a1",
			Model: "sandbox:demo", Seed: seed, Policy: tc.tp})
		var appErr *temporal.ApplicationError
		if tc.says == "" && err != nil || tc.says != "" && (!errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeWorkerConfig ||
			!strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), registered)) {
			t.Errorf("%s: ModelTurn = %v; want accepted, or worker_misconfigured saying %q and naming %s", tc.name, err, tc.says, registered)
		}
	}
}
