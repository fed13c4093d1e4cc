package workflows

import (
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// The search attributes Temporal's scheduler sets on every workflow a
// schedule starts: the schedule's id and the run's scheduled (nominal)
// time, to the second — the time in the run's workflow id.
const (
	attrScheduledByID      = "TemporalScheduledById"
	attrScheduledStartTime = "TemporalScheduledStartTime"
)

// scheduledTaskID is the task id of this chain when a schedule started it
// (changeScheduledTaskIDs): ScheduledTaskID of the schedule's id and the
// run's scheduled time, read from the search attributes of the run's
// start (WorkflowInfo, the same on every replay); "" for a task no
// schedule started, or one started before the change. Read once, as the
// chain's first run starts; the version marker is recorded only for a
// scheduled run, so no other task's history changes. A continued run
// keeps the id in its input.
func scheduledTaskID(ctx workflow.Context) string {
	fields := workflow.GetInfo(ctx).SearchAttributes.GetIndexedFields()
	idP, atP := fields[attrScheduledByID], fields[attrScheduledStartTime]
	if idP == nil || atP == nil {
		return ""
	}
	// The scheduler writes both as JSON (a string, an RFC 3339 time),
	// with or without the type the server may add: decode the payloads
	// themselves rather than rely on that type.
	dc := converter.GetDefaultDataConverter()
	var sid string
	var at time.Time
	if dc.FromPayload(idP, &sid) != nil || dc.FromPayload(atP, &at) != nil || sid == "" || at.IsZero() {
		return ""
	}
	if workflow.GetVersion(ctx, changeScheduledTaskIDs, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return ""
	}
	return ScheduledTaskID(sid, at)
}
