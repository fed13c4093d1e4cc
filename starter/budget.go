package main

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// budgetFlags are `starter run`'s budgets (docs/design.md §11.4).
type budgetFlags struct {
	maxTokens int64
	maxCost   float64
}

// taskBudget checks the task's budgets. Only what the task sets travels
// in its input; the worker that runs its first step fills the rest
// (CAPSTAN_MAX_TOKENS_PER_TASK, CAPSTAN_MAX_COST_PER_TASK). A cost budget
// needs a price for each of the task's models in the starter's table
// (CAPSTAN_MODEL_PRICES over the defaults): a task that could not be
// priced is refused before anything starts.
func (a *app) taskBudget(f budgetFlags, models []string) (contract.Budget, error) {
	if f.maxTokens < 0 {
		return contract.Budget{}, usagef("--max-tokens %d must be a positive number of tokens", f.maxTokens)
	}
	if f.maxCost < 0 {
		return contract.Budget{}, usagef("--max-cost %g must be a positive amount of US dollars", f.maxCost)
	}
	if f.maxCost > 0 {
		prices := a.cfg.ModelPrices
		if prices == nil {
			prices = config.DefaultModelPrices
		}
		if missing := config.UnpricedModels(prices, models...); len(missing) > 0 {
			return contract.Budget{}, usagef("--max-cost needs a price for every model of the task, and %s has none: add it to CAPSTAN_MODEL_PRICES as provider:model=IN/OUT (USD per million input and output tokens)",
				strings.Join(missing, ", "))
		}
	}
	return contract.Budget{MaxTokens: f.maxTokens, MaxCostUSD: f.maxCost}, nil
}

// spendLine is what a task's model requests have spent against its budget,
// as `starter status` shows it: "spent: 360 of 300 tokens (3 requests, 0
// estimated), $0.0000 (no cost budget)"; or "…, $0.0012 (budget $0.5)".
func spendLine(s workflows.Spend) string {
	cost := "no cost budget"
	if s.MaxCostUSD > 0 {
		cost = fmt.Sprintf("budget $%g", s.MaxCostUSD)
	}
	return fmt.Sprintf("spent: %d of %d tokens (%d requests, %d estimated), $%.4f (%s)",
		s.Tokens, s.MaxTokens, s.Requests, s.EstimatedTokens, s.CostUSD, cost)
}
