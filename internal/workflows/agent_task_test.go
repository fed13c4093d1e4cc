package workflows_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

var a *activities.Activities

// A mutation whose retries run out while another claim holds it may have
// acted: in a task started before reconciliation (v2), the task ends
// operation_unknown with the operation UNKNOWN, never FAILED.
func TestExhaustedMutationIsUnknownNeverFailed(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	env.OnGetVersion("all-changes-v7", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion("reconcile-unknown-operations", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(contract.ModelTurnResult{
		Transcript: "sha256:00",
		ToolCalls: []contract.ToolCallRef{{ID: "call_1", Name: "github_create_pull_request", Class: "conditional",
			BusinessKey: "pr:create:acme/app:feat:main", Arguments: "sha256:01", Summary: "create_pull_request acme/app feat → main"}},
	}, nil)
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{},
		temporal.NewApplicationError("held by another worker", contract.ErrTypeOperationInProgress))

	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T1", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != string(workflows.FailOperationUnknown) {
		t.Fatalf("workflow error = %v, want %s", err, workflows.FailOperationUnknown)
	}
	var res workflows.TaskResult
	if err := appErr.Details(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Operations) != 1 || res.Operations[0].State != capstan.OutcomeUnknown {
		t.Errorf("operations = %+v, want one UNKNOWN", res.Operations)
	}
	if want := "default:T1:~3c4e2731fc30:github_create_pull_request:pr:create:acme/app:feat:main"; res.Operations[0].OperationID != want {
		t.Errorf("operation id = %s, want %s", res.Operations[0].OperationID, want)
	}
}

// A model attempt whose worker went away is tried again as a new attempt.
func TestLostWorkerAttemptIsRetried(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	calls := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			calls++
			if calls == 1 {
				return contract.ModelTurnResult{}, temporal.NewNonRetryableApplicationError("worker stopping", contract.ErrTypeModelAttempt, nil,
					contract.AttemptReport{AttemptID: in.AttemptID, Outcome: model.OutcomeCancelled, Phase: model.PhaseStreamPartial})
			}
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:01", Text: "done", Phase: model.PhaseStreamCompleted}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T2", Tenant: "default", Prompt: "p", Model: "openai:m"})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Status != workflows.StatusCompleted || len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 2 {
		t.Fatalf("result = %+v, want completed after two attempts", res)
	}
	if got := res.Turns[0].Attempts[1].AttemptID; got != "T2/~3c4e2731fc30/t1/a2" {
		t.Errorf("second attempt id = %s, want T2/~3c4e2731fc30/t1/a2", got)
	}
}

// Calls without a business key are named by their position in the
// committed turn, so the same committed turn always yields the same ids.
func TestOperationIDsWithoutBusinessKeyComeFromThePosition(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	put := func(id string) contract.ToolCallRef {
		return contract.ToolCallRef{ID: id, Name: "github_put_file", Class: "idempotent", Arguments: "sha256:" + id, Summary: "put_file"}
	}
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			if in.Transcript == "" {
				return contract.ModelTurnResult{Transcript: "sha256:10", ToolCalls: []contract.ToolCallRef{put("call_a"), put("call_b")}}, nil
			}
			return contract.ModelTurnResult{Transcript: "sha256:11", Text: "done"}, nil
		})
	// The result spells its state as a worker before the one vocabulary
	// did; the workflow reads it as succeeded.
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{State: "SUCCEEDED", Item: "sha256:20"}, nil)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T3", Tenant: "default", Prompt: "p", Model: "openai:m"})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	want := []string{"default:T3:~3c4e2731fc30:t1:github_put_file:1", "default:T3:~3c4e2731fc30:t1:github_put_file:2"}
	if len(res.Operations) != 2 || res.Operations[0].OperationID != want[0] || res.Operations[1].OperationID != want[1] {
		t.Fatalf("operations = %+v, want ids %v", res.Operations, want)
	}
	for _, op := range res.Operations {
		if op.State != capstan.OutcomeSucceeded {
			t.Errorf("operation %s is %q, want %q", op.OperationID, op.State, capstan.OutcomeSucceeded)
		}
	}
}
