package workflows

import (
	"fmt"
	"strings"
)

// WorkflowID is the workflow id of a task.
func WorkflowID(taskID string) string { return "task-" + taskID }

func turnID(taskID string, turn int) string { return fmt.Sprintf("%s/t%d", taskID, turn) }

func attemptID(turnID string, attempt int) string { return fmt.Sprintf("%s/a%d", turnID, attempt) }

// operationID names an intended effect (docs/design.md §5.2). With a business key it
// is the same for every call with the same effect in this task, so a
// re-declared call maps to the recorded operation; without one, it is
// unique per declared call: n is the call's position in its committed turn
// (a uuid from workflow.SideEffect in tasks started before that change).
func operationID(tenant, taskID, tool, businessKey, turn, n string) string {
	if businessKey != "" {
		return strings.Join([]string{tenant, taskID, tool, businessKey}, ":")
	}
	return strings.Join([]string{tenant, taskID, turn, tool, n}, ":")
}

// deliveryOperationID names the delivery of a task's answer to one target:
// one per target and task, so a retry, a reset or a reconciler always finds
// the same operation.
func deliveryOperationID(tenant, taskID string, d target) string {
	if d.comment != nil {
		return strings.Join([]string{tenant, taskID, "deliver", "github", fmt.Sprintf("%s#%d", d.comment.Repo, d.comment.Number)}, ":")
	}
	return strings.Join([]string{tenant, taskID, "deliver", "slack", d.slack}, ":")
}
