package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// workerLimitsTimeout bounds the local activity that reads the worker's
// limits: it reads memory, so a long wait means a stuck worker.
const workerLimitsTimeout = 10 * time.Second

// settleLimits completes the task's limits once, at its start (since
// changeLimitsFromWorker): what the input leaves unset comes from the worker
// running this first step, read by the WorkerLimits local activity, whose
// answer history records, so every later step on any worker — and every
// replay — reads the same values. The whole is checked again, as the task's
// own limits and the worker's defaults first meet here; a task they do not
// fit ends invalid_limits before anything is sent. The settled limits are
// carried into the next run by continue-as-new with the rest of the input.
func (t *task) settleLimits(ctx workflow.Context) error {
	if !t.inEffect(ctx, changeLimitsFromWorker) {
		return nil
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{ScheduleToCloseTimeout: workerLimitsTimeout})
	var res contract.WorkerLimitsResult
	if err := workflow.ExecuteLocalActivity(lctx, contract.ActivityWorkerLimits, contract.WorkerLimitsInput{}).Get(ctx, &res); err != nil {
		return fail(FailWorkerMisconfigured, "the worker could not tell its model limits: %v", err)
	}
	own := t.in.ModelLimits
	t.in.ModelLimits = own.Under(res.Limits).WithDefaults()
	l := t.in.ModelLimits
	if err := l.Validate(); err != nil {
		return fail(FailInvalidLimits, "the task's limits do not fit with the worker's: %v", err)
	}
	t.note(ctx, "model limits: idle %s, first event %s, attempt %s, heartbeat %s (%s)",
		l.Idle, l.FirstEvent, l.Total, l.HeartbeatTimeout, limitsSource(own))
	if t.pinTools {
		t.pinMCPTools(ctx, res.Tools)
	}
	if t.budgets {
		return t.settleBudget(ctx, res)
	}
	return nil
}

// limitsSource says which of the limits the task set itself.
func limitsSource(own model.Limits) string {
	var set []string
	if own.Idle > 0 {
		set = append(set, "idle")
	}
	if own.FirstEvent > 0 {
		set = append(set, "first event")
	}
	if own.Total > 0 {
		set = append(set, "attempt")
	}
	if own.HeartbeatTimeout > 0 {
		set = append(set, "heartbeat")
	}
	if len(set) == 0 {
		return "all the worker's"
	}
	return "the task set " + strings.Join(set, ", ") + "; the rest are the worker's"
}

// pinMCPTools fixes the task's MCP tools (changeMCPToolsPinned): those of
// the worker running its first step, with their schema hashes, as the
// WorkerLimits answer recorded in history gives them. The set is kept in
// the task's input, so it outlives continue-as-new; it is set even when
// empty, so a task started on a worker without MCP tools is offered none.
func (t *task) pinMCPTools(ctx workflow.Context, pins []contract.ToolPin) {
	t.in.Tools = &contract.ToolSet{Pins: append([]contract.ToolPin{}, pins...)}
	if len(pins) == 0 {
		return
	}
	names := make([]string, len(pins))
	for i, p := range pins {
		names[i] = p.Name
	}
	t.note(ctx, "MCP tools fixed for this task: %s", strings.Join(names, ", "))
}
