package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// runScheduled runs a one-turn task whose start carries the search
// attributes a schedule sets, with the scheduled-task-ids change at
// version, and returns its result and the turn id its model turn was given.
func runScheduled(t *testing.T, version workflow.Version) (workflows.TaskResult, string) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	env.OnGetVersion("scheduled-task-ids", workflow.DefaultVersion, 1).Return(version)
	if version == workflow.DefaultVersion {
		env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
	}
	at := time.Date(2026, 12, 2, 16, 5, 0, 0, time.UTC)
	if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(
		temporal.NewSearchAttributeKeyKeyword("TemporalScheduledById").ValueSet("nightly"),
		temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime").ValueSet(at),
	)); err != nil {
		t.Fatal(err)
	}
	turnID := ""
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			turnID = in.TurnID
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:01", Text: "done", Phase: model.PhaseStreamCompleted}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "nightly", Tenant: "default", Prompt: "p", Model: "openai:m"})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res, turnID
}

// A run a schedule started is a task of its own: its task id is the
// schedule's id and the run's scheduled time, with no ":", and every ledger
// key it makes starts with it; a run started before the change keeps the
// id its input gave.
func TestScheduledRunTakesItsTaskIDFromTheSchedule(t *testing.T) {
	t.Parallel()
	res, turn := runScheduled(t, 1)
	if want := "nightly-20261202T160500Z"; res.TaskID != want || !strings.HasPrefix(turn, want+"/") {
		t.Errorf("task id %q, turn id %q; want task id %s and the turn id under it", res.TaskID, turn, want)
	}
	if strings.Contains(res.TaskID, ":") {
		t.Errorf("task id %q holds a ':'", res.TaskID)
	}
	old, turn := runScheduled(t, workflow.DefaultVersion)
	if old.TaskID != "nightly" || !strings.HasPrefix(turn, "nightly/") {
		t.Errorf("before the change: task id %q, turn id %q; want the input's, nightly", old.TaskID, turn)
	}
}

// A scheduled run's task id names the workflow Temporal's scheduler gave
// it, and back.
func TestScheduledTaskIDMapsToItsWorkflowID(t *testing.T) {
	t.Parallel()
	id := workflows.ScheduledTaskID("nightly", time.Date(2026, 12, 2, 16, 5, 0, 0, time.UTC))
	wid := workflows.WorkflowID(id)
	if wid != "task-nightly-2026-12-02T16:05:00Z" || workflows.TaskIDOf(wid) != id || !workflows.IsScheduledTaskID(id) {
		t.Errorf("task %s: workflow %s, back %s", id, wid, workflows.TaskIDOf(wid))
	}
	if workflows.WorkflowID("plain-1") != "task-plain-1" || workflows.TaskIDOf("task-plain-1") != "plain-1" || workflows.IsScheduledTaskID("20261202-160500-abcdef") {
		t.Error("an ordinary task id does not map to task-<id> and back")
	}
}
