package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/workflows"
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
