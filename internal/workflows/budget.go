package workflows

import (
	"fmt"
	"math"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// This file holds a task's budgets (docs/design.md §11.4, since
// changeBudgets): what its model requests may spend, in tokens and in US
// dollars, and what they have spent.

// Spend is what a task's model requests have spent so far, against its
// budget: TaskResult.Spend, so `starter status` shows it and a continued
// run carries it on in its checkpoint.
type Spend struct {
	// Tokens is the input plus output tokens of every attempt that may
	// have reached the provider, abandoned ones included: the provider's
	// reported usage, or the estimate (input characters / 4) of an attempt
	// that reported none; EstimatedTokens is the part that was estimated.
	Tokens          int64 `json:"tokens"`
	EstimatedTokens int64 `json:"estimated_tokens,omitempty"`
	// CostUSD prices Tokens by the task's price table (AgentTaskInput.Prices).
	CostUSD float64 `json:"cost_usd"`
	// Requests counts the attempts that spent something.
	Requests int `json:"requests"`
	// MaxTokens and MaxCostUSD are the task's budget; zero sets no ceiling
	// of that kind (a task always has a token budget).
	MaxTokens  int64   `json:"max_tokens,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// settleBudget completes the task's budget at its start, as settleLimits
// does its limits: what the input leaves unset comes from the worker
// running this first step (res, recorded in history), and the price table
// of the task's models is kept with its input. A cost budget on a model
// the table does not price ends the task invalid_limits before anything
// is sent (the starter refuses it already; this is the worker's table).
func (t *task) settleBudget(ctx workflow.Context, res contract.WorkerLimitsResult) error {
	own := t.in.Budget
	b := own.Under(res.Budget).Under(contract.Budget{MaxTokens: config.DefaultMaxTokensPerTask})
	t.in.Budget = b
	models := append([]string{t.in.Model}, t.in.Fallbacks...)
	t.in.Prices = map[string]config.Price{}
	for _, m := range models {
		if p, ok := res.Prices[m]; ok {
			t.in.Prices[m] = p
		}
	}
	t.result.Spend = &Spend{MaxTokens: b.MaxTokens, MaxCostUSD: b.MaxCostUSD}
	if b.MaxCostUSD > 0 {
		if missing := config.UnpricedModels(t.in.Prices, models...); len(missing) > 0 {
			return fail(FailInvalidLimits, "the task has a cost budget of $%g but its worker has no price for %s (CAPSTAN_MODEL_PRICES)",
				b.MaxCostUSD, strings.Join(missing, ", "))
		}
	}
	cost, source := "no cost budget", "the worker's"
	if b.MaxCostUSD > 0 {
		cost = fmt.Sprintf("$%g", b.MaxCostUSD)
	}
	if own.MaxTokens > 0 || own.MaxCostUSD > 0 {
		source = "the task's own where it set one, else the worker's"
	}
	t.note(ctx, "budget: %d tokens, %s (%s)", b.MaxTokens, cost, source)
	return nil
}

// checkBudget is read before every model request: it is sent only while
// what the task has spent is below its budget; otherwise the task ends
// budget_exhausted, its message listing what it did.
func (t *task) checkBudget(ctx workflow.Context, attemptID string) error {
	s := t.result.Spend
	if !t.budgets || s == nil {
		return nil
	}
	var over string
	switch {
	case s.MaxTokens > 0 && s.Tokens >= s.MaxTokens:
		over = fmt.Sprintf("%d tokens of its %d-token budget", s.Tokens, s.MaxTokens)
	case s.MaxCostUSD > 0 && s.CostUSD >= s.MaxCostUSD:
		over = fmt.Sprintf("$%.4f of its $%g budget", s.CostUSD, s.MaxCostUSD)
	default:
		return nil
	}
	cost := ""
	if len(t.in.Prices) > 0 {
		cost = fmt.Sprintf("; $%.4f", s.CostUSD)
	}
	msg := fmt.Sprintf("the task has spent %s, so %s was not sent; it made %d model request(s) over %d turn(s) (%d tokens, %d of them estimated%s) and %s",
		over, attemptID, s.Requests, t.turnsAsked(), s.Tokens, s.EstimatedTokens, cost, t.operationsDone())
	t.note(ctx, "budget exhausted: %s", msg)
	workflow.GetMetricsHandler(ctx).Counter(metricBudgetExhausted).Inc(1)
	return fail(FailBudgetExhausted, "%s", msg)
}

// turnsAsked counts the turns that made at least one model attempt.
func (t *task) turnsAsked() int {
	n := 0
	for _, tr := range t.result.Turns {
		if len(tr.Attempts) > 0 {
			n++
		}
	}
	return n
}

// operationsDone lists the task's operations for budget_exhausted's
// message: "no tool operation", or each tool with its state.
func (t *task) operationsDone() string {
	if len(t.result.Operations) == 0 {
		return "no tool operation"
	}
	ops := make([]string, 0, len(t.result.Operations))
	for _, op := range t.result.Operations {
		ops = append(ops, fmt.Sprintf("%s %s", op.Tool, op.State))
	}
	return fmt.Sprintf("%d tool operation(s): %s", len(ops), strings.Join(ops, ", "))
}

// Metrics of the budgets, through the Temporal SDK's workflow metrics
// handler (not emitted on replay), which tags them with the task queue,
// namespace and workflow type; a worker exports them with the SDK's own as
// capstan_task_tokens_total{kind="reported"|"estimated"},
// capstan_task_cost_microusd_total and capstan_budget_exhausted_total.
const (
	metricTaskTokens      = "capstan_task_tokens"
	metricTaskCostMicro   = "capstan_task_cost_microusd"
	metricBudgetExhausted = "capstan_budget_exhausted"
)

// spend adds one attempt's usage, on model m, to what the task has spent.
func (t *task) spend(ctx workflow.Context, m string, u model.Usage, estimated bool) {
	s := t.result.Spend
	n := u.InputTokens + u.OutputTokens
	if !t.budgets || s == nil || n <= 0 {
		return
	}
	s.Requests++
	s.Tokens += n
	kind := "reported"
	if estimated {
		s.EstimatedTokens += n
		kind = "estimated"
	}
	metrics := workflow.GetMetricsHandler(ctx)
	metrics.WithTags(map[string]string{"kind": kind}).Counter(metricTaskTokens).Inc(n)
	if p, ok := t.in.Prices[m]; ok {
		usd := p.Cost(u.InputTokens, u.OutputTokens)
		s.CostUSD += usd
		metrics.Counter(metricTaskCostMicro).Inc(int64(math.Round(usd * 1e6)))
	}
}
