package workflows_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/workflows"
)

// While a task waits for a breaker, its status query and its current
// details (what the Temporal UI shows) say which breaker and for how long;
// once the wait is over they say nothing of it.
func TestBreakerWaitIsShownWhileItLasts(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	toolBreakerOpenThen(1)(env)

	var during workflows.TaskResult
	var details string
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryStatus)
		if err != nil {
			t.Error(err)
			return
		}
		if err := v.Get(&during); err != nil {
			t.Error(err)
		}
		v, err = env.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Error(err)
			return
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Error(err)
		}
		details = md.GetCurrentDetails()
	}, 10*time.Second)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(during.Waiting, "waiting 30s for breaker github/write (until ") {
		t.Errorf("status while waiting: Waiting = %q, want the breaker and the wait", during.Waiting)
	}
	if !strings.Contains(details, "Waiting 30s for breaker `github/write`") || !strings.Contains(details, "was not sent") {
		t.Errorf("current details while waiting = %q, want the breaker and the wait", details)
	}
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Status != workflows.StatusCompleted || res.Waiting != "" {
		t.Errorf("result = %s, Waiting %q; want completed, waiting for nothing", res.Status, res.Waiting)
	}
}
