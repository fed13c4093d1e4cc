package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Deliver posts an approval notice as plain text and a final answer as
// mrkdwn, telling them apart by the operation id
// (contract.IsApprovalNotice): the workflow's notice ids carry
// contract.ApprovalNoticeMark, and its final answers' do not.
func TestApprovalNoticeIDsAreToldFromDeliveries(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	turns := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			turns++
			if turns > 1 {
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:99", Text: "done"}, nil
			}
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:10", ToolCalls: []contract.ToolCallRef{prCall}}, nil
		})
	// The pull request waits for an approval that never comes.
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			return contract.ExecuteToolResult{OperationID: in.OperationID, State: capstan.OutcomeAwaitingApproval,
				Decision: &contract.PolicyDecision{Effect: "require_approval", Rule: "task/require-approval", Reason: "asked"},
				Awaiting: &contract.AwaitingApproval{Summary: "pull request feat → main in acme/app", Effect: "effect-pr"}}, nil
		})
	var mu sync.Mutex
	var posted []contract.DeliverInput
	env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.DeliverInput) (contract.DeliverResult, error) {
			mu.Lock()
			defer mu.Unlock()
			posted = append(posted, in)
			return contract.DeliverResult{OperationID: in.OperationID, ExternalID: "C1/1.000001"}, nil
		})
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m",
		Repo: "acme/app", SlackChannel: "#approvals"})

	mu.Lock()
	defer mu.Unlock()
	if len(posted) != 1 || !contract.IsApprovalNotice(posted[0].OperationID) {
		t.Fatalf("Deliver was given %+v, want one approval notice whose operation id carries %q", posted, contract.ApprovalNoticeMark)
	}

	// A task that answers at once delivers its answer: not a notice.
	final := runTask(t, workflows.AgentTaskInput{SlackChannel: "#eng"}, times(1, answer("done", "stop")), func(env *testsuite.TestWorkflowEnvironment, _ *script) {
		env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(contract.DeliverResult{ExternalID: "C1/1.000002"}, nil)
	})
	if len(final.res.Deliveries) != 1 || contract.IsApprovalNotice(final.res.Deliveries[0].OperationID) {
		t.Errorf("deliveries = %+v, want one final answer whose operation id is not a notice's", final.res.Deliveries)
	}
}
