package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// WorkflowID is the workflow id of a task: "task-" and its id. A scheduled
// run's task id (ScheduledTaskID, "SID-20261202T160500Z") maps to the
// workflow id Temporal's scheduler gives that run: the schedule action's
// workflow id, "task-SID", then "-" and the run's scheduled time in RFC 3339
// ("task-SID-2026-12-02T16:05:00Z"). starter run refuses ids of that form
// (IsScheduledTaskID), so the mapping names one workflow.
func WorkflowID(taskID string) string {
	if m := scheduledTaskIDForm.FindStringSubmatch(taskID); m != nil {
		if at, err := time.Parse(scheduledTimeLayout, m[2]); err == nil {
			return "task-" + m[1] + "-" + at.Format(time.RFC3339)
		}
	}
	return "task-" + taskID
}

// TaskIDOf is the task id of a task's workflow id, WorkflowID's inverse.
func TaskIDOf(workflowID string) string {
	id := strings.TrimPrefix(workflowID, "task-")
	if m := scheduledWorkflowID.FindStringSubmatch(id); m != nil {
		if at, err := time.Parse(time.RFC3339, m[2]); err == nil {
			return ScheduledTaskID(m[1], at)
		}
	}
	return id
}

// ScheduledTaskID is the task id of the run of schedule scheduleID
// scheduled for at: the schedule id, "-", and the time in UTC to the
// second, with no ":" ("SID-20261202T160500Z"). Every run of a schedule is
// a task of its own, so no two runs share operation ids or ledger rows.
func ScheduledTaskID(scheduleID string, at time.Time) string {
	return scheduleID + "-" + at.UTC().Format(scheduledTimeLayout)
}

// IsScheduledTaskID reports whether id has the form of a scheduled run's
// task id, which only a schedule gives.
func IsScheduledTaskID(id string) bool { return scheduledTaskIDForm.MatchString(id) }

const scheduledTimeLayout = "20060102T150405Z"

var (
	scheduledTaskIDForm = regexp.MustCompile(`^(.+)-(\d{8}T\d{6}Z)$`)
	scheduledWorkflowID = regexp.MustCompile(`^(.+)-(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)$`)
)

// ChainScope is the token that scopes a task's ledger keys to its namespace
// and execution chain (docs/design.md §5.2): "~" and the first 12 hex digits
// of sha256(namespace + "/" + first run id). The first run id is the same
// for every run of a chain — continue-as-new and workflow reset keep it —
// and new for a task started again with the same id, so a reused id, or
// the same id in another namespace on the same ledger, never meets the
// rows of another chain. Empty for tasks started before
// changeLedgerKeysPerChain, whose keys carry no scope.
func ChainScope(namespace, firstRunID string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + firstRunID))
	return "~" + hex.EncodeToString(sum[:6])
}

// scopeToken matches a chain scope as it opens a key's remainder, followed
// by the ":" of an operation id or the "/" of a turn or attempt id.
var scopeToken = regexp.MustCompile(`^~[0-9a-f]{12}[:/]`)

// WithoutScope is rest, an id's remainder after its task id and separator
// ("~3fa9c0d1e2b4:t4:github_comment:1", "~3fa9c0d1e2b4/t1/a2"), without
// the chain scope that opens it, for human output; rest as it is when no
// scope opens it.
func WithoutScope(rest string) string {
	if loc := scopeToken.FindStringIndex(rest); loc != nil {
		return rest[loc[1]:]
	}
	return rest
}

// keyTask is the task part of a key: the task id, and the chain scope
// after sep when the task has one.
func keyTask(taskID, scope, sep string) string {
	if scope == "" {
		return taskID
	}
	return taskID + sep + scope
}

func turnID(taskID, scope string, turn int) string {
	return fmt.Sprintf("%s/t%d", keyTask(taskID, scope, "/"), turn)
}

func attemptID(turnID string, attempt int) string { return fmt.Sprintf("%s/a%d", turnID, attempt) }

// operationID names an intended effect (docs/design.md §5.2). With a business key it
// is the same for every call with the same effect in this task, so a
// re-declared call maps to the recorded operation; without one, it is
// unique per declared call: n is the call's position in its committed turn
// (a uuid from workflow.SideEffect in tasks started before that change).
//
// A task's chain scope (ChainScope), when it has one, follows the task id
// as a segment of its own: "<tenant>:<task id>:<scope>:…".
func operationID(tenant, taskID, scope, impl, businessKey, turn, n string) string {
	task := keyTask(taskID, scope, ":")
	if businessKey != "" {
		return strings.Join([]string{tenant, task, impl, businessKey}, ":")
	}
	return strings.Join([]string{tenant, task, turn, impl, n}, ":")
}

// deliveryOperationID names the delivery of a task's answer to one target:
// one per target and task, so a retry, a reset or a reconciler always finds
// the same operation.
func deliveryOperationID(tenant, taskID, scope string, d target) string {
	task := keyTask(taskID, scope, ":")
	if d.comment != nil {
		return strings.Join([]string{tenant, task, "deliver", "github", fmt.Sprintf("%s#%d", d.comment.Repo, d.comment.Number)}, ":")
	}
	return strings.Join([]string{tenant, task, "deliver", "slack", d.slack}, ":")
}
