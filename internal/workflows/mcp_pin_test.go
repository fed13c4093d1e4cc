package workflows_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// pinnedRun runs a one-turn task whose first worker reports pins, and
// returns the Tools of every model turn's input.
func pinnedRun(t *testing.T, pins []contract.ToolPin, version workflow.Version) []*contract.ToolSet {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	env.OnGetVersion("mcp-tools-pinned", workflow.DefaultVersion, 1).Return(version)
	if version == workflow.DefaultVersion {
		env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	env.OnActivity(a.WorkerLimits, mock.Anything, mock.Anything).Return(contract.WorkerLimitsResult{
		Limits: model.Limits(config.DefaultModelLimits), Tools: pins}, nil)
	var mu sync.Mutex
	var seen []*contract.ToolSet
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			mu.Lock()
			seen = append(seen, in.Tools)
			mu.Unlock()
			return contract.ModelTurnResult{Transcript: "sha256:00", Text: "done", FinishReason: "stop"}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T1", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow: completed %v, error %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	return seen
}

// A task fixes its MCP tools, with their schema hashes, from the worker
// that runs its first step, and gives them to every model turn
// (changeMCPToolsPinned).
func TestMCPToolsAreFixedWhenTheTaskStarts(t *testing.T) {
	t.Parallel()
	pins := []contract.ToolPin{{Name: "mcp__sb__create_ticket", SchemaHash: "aa4313e6486bee2e"}}
	seen := pinnedRun(t, pins, 1)
	if len(seen) != 1 || seen[0] == nil || len(seen[0].Pins) != 1 || seen[0].Pins[0] != pins[0] {
		t.Fatalf("model turns were given %+v, want the pins %+v", seen, pins)
	}
	// A worker without MCP tools fixes an empty set: none is offered later.
	if seen := pinnedRun(t, nil, 1); len(seen) != 1 || seen[0] == nil || len(seen[0].Pins) != 0 {
		t.Errorf("without MCP tools the turns were given %+v, want an empty set", seen)
	}
	// A task started before the change fixes nothing.
	if seen := pinnedRun(t, pins, workflow.DefaultVersion); len(seen) != 1 || seen[0] != nil {
		t.Errorf("before the change the turns were given %+v, want nil", seen)
	}
}
