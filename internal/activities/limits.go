package activities

import (
	"context"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// WorkerLimits returns this worker's default limits. A task runs it once,
// as a local activity, at its start: the limits its input leaves unset are
// taken from the worker that runs that first step, and recorded in the
// task's history with the answer, so every later step — on any worker of
// the pool, and on replay — reads the same values.
func (a *Activities) WorkerLimits(_ context.Context, _ contract.WorkerLimitsInput) (contract.WorkerLimitsResult, error) {
	// The design's defaults under the worker's own; FirstEvent stays unset
	// unless the worker set it (config.DefaultModelLimits sets none).
	l := a.ModelLimits.Under(model.Limits(config.DefaultModelLimits))
	budget := a.Budget.Under(contract.Budget{MaxTokens: config.DefaultMaxTokensPerTask})
	prices := a.Prices
	if prices == nil {
		prices = config.DefaultModelPrices
	}
	return contract.WorkerLimitsResult{Limits: l, Budget: budget, Prices: prices, Tools: a.toolPins()}, nil
}
