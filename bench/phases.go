package main

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// phaseSums is where tasks' time went, read from their histories by the
// server's clock: each phase's time summed over the tasks read, and their
// count. Workflow and activity tasks "wait" from being scheduled until a
// worker takes them and "run" until the worker answers.
type phaseSums struct {
	tasks int
	total time.Duration // from start to close
	sum   map[string]time.Duration
	// wftTimeouts counts WorkflowTaskTimedOut events. A workflow task on a
	// worker's sticky queue that no worker took within the sticky
	// schedule-to-start timeout (5 s by the SDK's default), or one that ran
	// past its start-to-close timeout, is scheduled again, and whoever takes
	// it replays the whole history: CPU a loaded pool would spend on
	// nothing new.
	wftTimeouts int
	err         error
}

// Phase names, in the order the report lists them.
const (
	phaseWFTWait      = "workflow tasks waiting for a worker"
	phaseWFTRun       = "workflow tasks running"
	phaseActivityWait = "activities waiting for a worker"
	phaseModel        = "model turns running"
	phaseTool         = "tool calls running"
	phaseDeliver      = "deliveries running"
	phaseOtherRun     = "other activities running"
)

var phaseOrder = []string{phaseWFTWait, phaseWFTRun, phaseActivityWait, phaseModel, phaseTool, phaseDeliver, phaseOtherRun}

// activityPhase names the phase an activity type runs in, for both kinds.
func activityPhase(activityType string) string {
	switch activityType {
	case "ModelTurn", "BareModelTurn":
		return phaseModel
	case "ExecuteTool", "BareTool":
		return phaseTool
	case "Deliver", "BareDeliver":
		return phaseDeliver
	default:
		return phaseOtherRun
	}
}

// maxPhaseSamples bounds the histories read per cell.
const maxPhaseSamples = 100

// taskPhases reads the histories of a cell's completed tasks.
func (e *env) taskPhases(ctx context.Context, s *loadStats) phaseSums {
	ps := phaseSums{sum: map[string]time.Duration{}}
	for _, r := range s.rounds {
		for _, id := range r.ids {
			if ps.tasks >= maxPhaseSamples {
				return ps
			}
			h, err := e.fetchHistory(ctx, id, "")
			if err != nil {
				ps.err = err
				return ps
			}
			evs := h.GetEvents()
			if len(evs) == 0 {
				continue
			}
			ps.tasks++
			ps.total += evs[len(evs)-1].GetEventTime().AsTime().Sub(evs[0].GetEventTime().AsTime())
			at := map[int64]time.Time{} // event id → time
			types := map[int64]string{} // activity scheduled event id → phase
			for _, ev := range evs {
				t := ev.GetEventTime().AsTime()
				at[ev.GetEventId()] = t
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
					types[ev.GetEventId()] = activityPhase(ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName())
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
					ps.sum[phaseActivityWait] += t.Sub(at[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()])
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
					a := ev.GetActivityTaskCompletedEventAttributes()
					ps.sum[types[a.GetScheduledEventId()]] += t.Sub(at[a.GetStartedEventId()])
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
					a := ev.GetActivityTaskFailedEventAttributes()
					ps.sum[types[a.GetScheduledEventId()]] += t.Sub(at[a.GetStartedEventId()])
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
					ps.wftTimeouts++
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
					ps.sum[phaseWFTWait] += t.Sub(at[ev.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId()])
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
					ps.sum[phaseWFTRun] += t.Sub(at[ev.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId()])
				}
			}
		}
	}
	return ps
}

// perTask is a phase's mean time per task.
func (ps phaseSums) perTask(phase string) time.Duration {
	if ps.tasks == 0 {
		return 0
	}
	return ps.sum[phase] / time.Duration(ps.tasks)
}

// rest is the mean time per task in none of the phases.
func (ps phaseSums) rest() time.Duration {
	if ps.tasks == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ps.sum {
		sum += d
	}
	return (ps.total - sum) / time.Duration(ps.tasks)
}
