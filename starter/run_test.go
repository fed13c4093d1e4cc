package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The per-task watchdog flags go into the task's input, and nothing else
// does: the starter's environment is not the worker's, and the limits a
// task leaves unset come from the worker that runs it (workflows,
// settleLimits).
func TestRunFlagsSetTheTasksModelLimits(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(k string) string {
		return map[string]string{"CAPSTAN_MODEL_MAX_DURATION": "5m"}[k]
	})}
	f := runFlags{prompt: "p", base: "main", tenant: "default", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout,
		idleTimeout: 45 * time.Second}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := (model.Limits{Idle: 45 * time.Second}); in.ModelLimits != want {
		t.Errorf("limits = %+v, want %+v: the flag's idle timeout alone", in.ModelLimits, want)
	}
	f.maxDuration = 90 * time.Second
	if in, err = a.taskInput(f); err != nil || in.ModelLimits != (model.Limits{Idle: 45 * time.Second, Total: 90 * time.Second}) {
		t.Errorf("--max-duration 90s: %+v, %v", in.ModelLimits, err)
	}
	f.idleTimeout = 2 * time.Minute
	if _, err := a.taskInput(f); err == nil {
		t.Error("an idle timeout longer than the attempt's total limit was accepted")
	}
}

// `starter run` fixes the task's policy context in its input: the
// repositories of --repo, each --comment and each --allow-repo (each once),
// base, prefix, the branches of --allow-branch (each once), tenant, labels,
// the refusal limit, and the text of the
// CAPSTAN_POLICY file; a bad file is refused with its line, nothing started.
func TestRunFixesTheTasksPolicyContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	text := "rules:\n  - name: no-docs\n    path: docs/**\n    effect: deny\n    reason: not docs\n"
	if err := os.WriteFile(good, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CAPSTAN_POLICY": good, "CAPSTAN_BRANCH_PREFIX": "bot/", "CAPSTAN_POLICY_REFUSALS": "5"}
	a := &app{cfg: config.FromEnv(func(k string) string { return env[k] })}
	f := runFlags{prompt: "p", repo: "acme/payments", base: "dev", tenant: "t1", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout,
		comments: []string{"acme/issues#4", "Acme/Payments#9"}, allowRepos: []string{"acme/docs", "ACME/docs"}, labels: []string{"env=prod", "team=pay"},
		allowBranches: []string{"gh-pages", "release/v2", "gh-pages"}}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	want := &contract.TaskPolicy{Repositories: []string{"acme/payments", "acme/issues", "acme/docs"}, Base: "dev", BranchPrefix: "bot/",
		Tenant: "t1", Labels: map[string]string{"env": "prod", "team": "pay"}, File: good, Source: text, MaxRefusals: 5,
		AllowBranches: []string{"gh-pages", "release/v2"}}
	if !reflect.DeepEqual(in.Policy, want) {
		t.Errorf("policy = %+v\nwant     %+v", in.Policy, want)
	}
	f.maxRefusals = 7
	if in, err = a.taskInput(f); err != nil || in.Policy.MaxRefusals != 7 {
		t.Errorf("--max-refusals 7: %+v, %v", in.Policy, err)
	}
	for _, bad := range []runFlags{{allowRepos: []string{"nope"}}, {labels: []string{"novalue"}}, {maxRefusals: -1},
		{allowBranches: []string{"refs/heads/gh-pages"}}, {allowBranches: []string{"a..b"}}, {allowBranches: []string{""}}} {
		g := f
		g.allowRepos, g.labels, g.maxRefusals, g.allowBranches = bad.allowRepos, bad.labels, bad.maxRefusals, bad.allowBranches
		var ue *usageError
		if _, err := a.taskInput(g); !errors.As(err, &ue) {
			t.Errorf("%+v: err = %v, want a usage error", bad, err)
		}
	}
	broken := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(broken, []byte("rules:\n  - name: a\n    effect: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["CAPSTAN_POLICY"] = broken
	a = &app{cfg: config.FromEnv(func(k string) string { return env[k] })}
	var ue *usageError
	if _, err := a.taskInput(f); !errors.As(err, &ue) || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("bad policy file: err = %v, want a usage error naming line 3", err)
	}
	// A rule naming a tool that is no built-in one, and no MCP tool's name
	// either, is refused here; an MCP tool's name is the worker's to check.
	for _, tc := range []struct {
		tool string
		ok   bool
	}{{"github_put_flie", false}, {"mcp__tickets__create", true}, {"github_*", true}} {
		file := filepath.Join(dir, "tool.yaml")
		if err := os.WriteFile(file, []byte("rules:\n  - name: a\n    tool: "+tc.tool+"\n    effect: deny\n    reason: no\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env["CAPSTAN_POLICY"] = file
		a = &app{cfg: config.FromEnv(func(k string) string { return env[k] })}
		_, err := a.taskInput(f)
		if tc.ok != (err == nil) || err != nil && (!errors.As(err, &ue) ||
			!strings.Contains(err.Error(), `line 3, rule "a": tool "github_put_flie" matches none of this worker's tools (github_comment, `)) {
			t.Errorf("a rule on tool %s: %v, want accepted %v (else a usage error naming line 3 and the tools)", tc.tool, err, tc.ok)
		}
	}
}

// --max-tokens and --max-cost go into the task's input; a cost budget on a
// model, or a fallback model, that the price table does not price is
// refused as bad usage (exit 2, nothing started), in one sentence; a price
// from CAPSTAN_MODEL_PRICES makes it acceptable.
func TestRunRefusesACostBudgetWithoutAPrice(t *testing.T) {
	t.Parallel()
	cfg := func(prices string) *app {
		return &app{cfg: config.FromEnv(func(k string) string {
			return map[string]string{"CAPSTAN_MODEL_PRICES": prices}[k]
		})}
	}
	f := runFlags{prompt: "p", base: "main", tenant: "default", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout,
		model: "openai:gpt-4.1", fallbacks: []string{"openai:local"}, budget: budgetFlags{maxTokens: 300}}
	in, err := cfg("").taskInput(f)
	if err != nil || in.Budget.MaxTokens != 300 || in.Budget.MaxCostUSD != 0 {
		t.Fatalf("--max-tokens 300: %+v, %v", in.Budget, err)
	}
	f.budget.maxCost = 0.5
	_, err = cfg("").taskInput(f)
	var ue *usageError
	if !errors.As(err, &ue) || strings.Count(ue.msg, ". ") > 0 || !strings.Contains(ue.msg, "openai:local has none") {
		t.Fatalf("cost budget on the unpriced fallback openai:local: err = %v, want one usage sentence naming it", err)
	}
	in, err = cfg("openai:local=0.5/1").taskInput(f)
	if err != nil || in.Budget.MaxCostUSD != 0.5 {
		t.Errorf("with a price for openai:local: %+v, %v", in.Budget, err)
	}
}

// status shows what the task spent against its budget.
func TestStatusShowsTheSpendAgainstTheBudget(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printResult(&b, workflows.TaskResult{TaskID: "T", Status: workflows.StatusFailed, FailureCode: workflows.FailBudgetExhausted,
		Spend: &workflows.Spend{Tokens: 360, Requests: 3, MaxTokens: 300, CostUSD: 0.00123, MaxCostUSD: 0.5}}, "http://ui")
	if want := "spent: 360 of 300 tokens (3 requests, 0 estimated), $0.0012 (budget $0.5)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status:\n%s\nwant the line %q", b.String(), want)
	}
}

// --require-approval takes a built-in tool's name, an MCP tool's, one a
// worker's own tool may have (outside github_) or a class, each once, into
// the task's policy context; any other name is one sentence, nothing
// started. --approval-timeout goes into the task's input, else
// CAPSTAN_APPROVAL_TIMEOUT.
func TestRunRequireApproval(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(k string) string {
		return map[string]string{"CAPSTAN_APPROVAL_TIMEOUT": "48h"}[k]
	})}
	f := runFlags{prompt: "p", repo: "acme/app", base: "main", tenant: "default", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout,
		requireApproval: []string{"github_create_pull_request", "unsafe", "github_create_pull_request", "mcp__tickets__create_ticket", "tickets_create"}}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Policy.RequireApproval; !reflect.DeepEqual(got, []string{"github_create_pull_request", "unsafe", "mcp__tickets__create_ticket", "tickets_create"}) || in.ApprovalTimeout != 48*time.Hour {
		t.Errorf("require approval %v, timeout %s; want the tool, the class, the MCP tool and the worker's own tool once each, 48h", got, in.ApprovalTimeout)
	}
	f.approvalTimeout = 3 * time.Second
	if in, err = a.taskInput(f); err != nil || in.ApprovalTimeout != 3*time.Second {
		t.Errorf("--approval-timeout 3s: %s, %v", in.ApprovalTimeout, err)
	}
	f.requireApproval = []string{"mcp__no-tool"}
	if _, err := a.taskInput(f); err == nil {
		t.Error("--require-approval mcp__no-tool (no tool after the server) was accepted")
	}
	f.requireApproval = []string{"launch missiles"}
	if _, err := a.taskInput(f); err == nil {
		t.Error("--require-approval \"launch missiles\" (no tool's name) was accepted")
	}
	f.requireApproval = []string{"github_merge"}
	_, err = a.taskInput(f)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `--require-approval "github_merge" is neither a tool (`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("an unknown name: %v, want one sentence naming the tools and classes", err)
	}
}
