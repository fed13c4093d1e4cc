package workflows_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/mock"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/workflows"
)

// Cancelling a task marks UNKNOWN only what was really in flight: an
// operation whose activity stopped before sending is ABSENT, and nothing is
// reconciled for it. (The test environment answers a cancelled activity at
// once, without waiting for what it reports, so the other half — an
// operation sent and then cancelled is reconciled before the task ends — is
// TestCancelReconcilesWhatWasInFlight in internal/e2e, on a real server.)
func TestCancelMarksUnknownOnlyWhatWasInFlight(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	callsThenAnswers(prCall)(env)
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ activities.ExecuteToolInput) (activities.ExecuteToolResult, error) {
			env.CancelWorkflow() // the task is cancelled while this call waits to send
			<-ctx.Done()
			return activities.ExecuteToolResult{}, ctx.Err()
		})
	reconciled := 0
	env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ReconcileInput) (activities.ReconcileResult, error) {
			reconciled++
			return activities.ReconcileResult{}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	res := taskResult(t, env.GetWorkflowError())
	if res.Status != workflows.StatusCancelled || len(res.Operations) != 1 || res.Operations[0].State != capstan.OutcomeAbsent {
		t.Fatalf("result = %s %+v, want cancelled with the operation ABSENT", res.Status, res.Operations)
	}
	if reconciled != 0 {
		t.Errorf("reconciled %d times an operation that was never sent", reconciled)
	}
}
