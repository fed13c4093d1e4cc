package activities

import (
	"context"

	"github.com/capstanhq/capstan/internal/model"
)

// WorkerLimitsInput asks for the worker's default limits.
type WorkerLimitsInput struct{}

// WorkerLimitsResult holds the worker's default limits (CAPSTAN_MODEL_* and
// CAPSTAN_HEARTBEAT_TIMEOUT), every field set but FirstEvent, which is zero
// unless the worker sets a first-event wait apart from its idle timeout.
type WorkerLimitsResult struct {
	Limits model.Limits `json:"limits"`
}

// WorkerLimits returns this worker's default limits. A task runs it once,
// as a local activity, at its start: the limits its input leaves unset are
// taken from the worker that runs that first step, and recorded in the
// task's history with the answer, so every later step — on any worker of
// the pool, and on replay — reads the same values.
func (a *Activities) WorkerLimits(_ context.Context, _ WorkerLimitsInput) (WorkerLimitsResult, error) {
	// The design's defaults under the worker's own; FirstEvent stays unset
	// unless the worker set it (DefaultLimits sets none).
	l := a.ModelLimits.Under(model.DefaultLimits)
	return WorkerLimitsResult{Limits: l}, nil
}
