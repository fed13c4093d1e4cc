package workflows_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// While a reconciler looks for an unknown operation's effect, the task's
// current details say what it looks for and the latest it is absent by
// (changeSettleBySending); they are cleared once it has its verdict.
func TestReconcilingIsShownInCurrentDetails(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	callsThenAnswers(prCall)(env)
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			return contract.ExecuteToolResult{}, temporal.NewNonRetryableApplicationError("timeout after send", contract.ErrTypeOperationUnknown, nil)
		})
	env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).After(time.Minute).Return(reconciled(capstan.VerdictFound), nil)
	details := func() string {
		v, err := env.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Error(err)
			return ""
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Error(err)
		}
		return md.GetCurrentDetails()
	}
	var during string
	env.RegisterDelayedCallback(func() { during = details() }, 30*time.Second)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(during, "**Reconciling** operation") || !strings.Contains(during, "looking for the effect of") ||
		!strings.Contains(during, "absent if not seen by ") {
		t.Errorf("current details while reconciling = %q, want what is looked for and until when", during)
	}
	if after := details(); after != "" {
		t.Errorf("current details after the verdict = %q, want none", after)
	}
}
