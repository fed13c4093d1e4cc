package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Budgets (docs/design.md §11.4): what a task may spend on its model
// requests, in tokens and in US dollars.

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	InputPerMillion  float64 `json:"input_per_million"`
	OutputPerMillion float64 `json:"output_per_million"`
}

// Cost is the price of in input and out output tokens, in US dollars.
func (p Price) Cost(in, out int64) float64 {
	return (float64(in)*p.InputPerMillion + float64(out)*p.OutputPerMillion) / 1e6
}

// DefaultMaxTokensPerTask is the token budget of a task that sets none
// (CAPSTAN_MAX_TOKENS_PER_TASK), so that no task runs without a ceiling.
// A task has no cost budget unless it or its worker sets one
// (CAPSTAN_MAX_COST_PER_TASK).
const DefaultMaxTokensPerTask int64 = 2_000_000

// DefaultModelPrices are the list prices, USD per million input and output
// tokens, of the models capstan knows (the providers' published prices;
// CAPSTAN_MODEL_PRICES adds models and overrides these).
var DefaultModelPrices = map[string]Price{
	"openai:gpt-4.1":                    {InputPerMillion: 2, OutputPerMillion: 8},
	"openai:gpt-4.1-mini":               {InputPerMillion: 0.4, OutputPerMillion: 1.6},
	"openai:gpt-4.1-nano":               {InputPerMillion: 0.1, OutputPerMillion: 0.4},
	"openai:gpt-4o":                     {InputPerMillion: 2.5, OutputPerMillion: 10},
	"openai:gpt-4o-mini":                {InputPerMillion: 0.15, OutputPerMillion: 0.6},
	"anthropic:claude-sonnet-4-5":       {InputPerMillion: 3, OutputPerMillion: 15},
	"anthropic:claude-opus-4-1":         {InputPerMillion: 15, OutputPerMillion: 75},
	"anthropic:claude-haiku-4-5":        {InputPerMillion: 1, OutputPerMillion: 5},
	"anthropic:claude-3-5-haiku-latest": {InputPerMillion: 0.8, OutputPerMillion: 4},
}

// ParseModelPrices reads CAPSTAN_MODEL_PRICES: comma-separated
// `provider:model=IN/OUT`, USD per million input and output tokens
// ("openai:gpt-4.1=2/8,anthropic:claude-sonnet-4-5=3/15"). The result is
// the default table with those entries added or replaced.
func ParseModelPrices(s string) (map[string]Price, error) {
	prices := maps.Clone(DefaultModelPrices)
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, pair, ok := strings.Cut(entry, "=")
		in, out, ok2 := strings.Cut(pair, "/")
		name = strings.TrimSpace(name)
		if !ok || !ok2 || !strings.Contains(name, ":") {
			return nil, fmt.Errorf("CAPSTAN_MODEL_PRICES entry %q is not provider:model=IN/OUT (USD per million input and output tokens)", entry)
		}
		pi, err1 := strconv.ParseFloat(strings.TrimSpace(in), 64)
		po, err2 := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err1 != nil || err2 != nil || pi < 0 || po < 0 {
			return nil, fmt.Errorf("CAPSTAN_MODEL_PRICES entry %q: the prices must be numbers of at least 0", entry)
		}
		prices[name] = Price{InputPerMillion: pi, OutputPerMillion: po}
	}
	return prices, nil
}

// UnpricedModels returns those of models that prices has no price for, in
// order.
func UnpricedModels(prices map[string]Price, models ...string) []string {
	var missing []string
	for _, m := range models {
		if _, ok := prices[m]; !ok && !slices.Contains(missing, m) {
			missing = append(missing, m)
		}
	}
	return missing
}

// readBudgets reads the worker's budgets and the price table.
func (c *Config) readBudgets(getenv func(string) string) {
	c.MaxTokensPerTask = DefaultMaxTokensPerTask
	if v := strings.TrimSpace(getenv("CAPSTAN_MAX_TOKENS_PER_TASK")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			c.problems = append(c.problems, fmt.Errorf("CAPSTAN_MAX_TOKENS_PER_TASK=%q is not a whole number of at least 1", v))
		} else {
			c.MaxTokensPerTask = n
		}
	}
	if v := strings.TrimSpace(getenv("CAPSTAN_MAX_COST_PER_TASK")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			c.problems = append(c.problems, fmt.Errorf("CAPSTAN_MAX_COST_PER_TASK=%q is not an amount of US dollars above 0", v))
		} else {
			c.MaxCostPerTask = f
		}
	}
	prices, err := ParseModelPrices(getenv("CAPSTAN_MODEL_PRICES"))
	if err != nil {
		c.problems = append(c.problems, err)
		prices = maps.Clone(DefaultModelPrices)
	}
	c.ModelPrices = prices
}
