package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The search attributes Temporal's scheduler sets on every workflow a
// schedule starts: the schedule's id and the run's scheduled (nominal)
// time, to the second — the time in the run's workflow id.
var (
	attrScheduledByID      = temporal.NewSearchAttributeKeyKeyword("TemporalScheduledById")
	attrScheduledStartTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")
)

// scheduledTaskID is the task id of this chain when a schedule started it
// (changeScheduledTaskIDs): ScheduledTaskID of the schedule's id and the
// run's scheduled time, read from the search attributes of the run's
// start — as the first workflow task sees them, before the task upserts
// any, the same on every replay; "" for a task no schedule started, or one
// started before the change. Read once, as the chain's first run starts;
// the version marker is recorded only for a scheduled run, so no other
// task's history changes. A continued run keeps the id in its input.
func scheduledTaskID(ctx workflow.Context, allThroughV13 bool) string {
	attrs := workflow.GetTypedSearchAttributes(ctx)
	sid, okID := attrs.GetKeyword(attrScheduledByID)
	at, okAt := attrs.GetTime(attrScheduledStartTime)
	if !okID || !okAt || sid == "" || at.IsZero() {
		return ""
	}
	if !allThroughV13 && workflow.GetVersion(ctx, changeScheduledTaskIDs, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ""
	}
	return ScheduledTaskID(sid, at)
}
