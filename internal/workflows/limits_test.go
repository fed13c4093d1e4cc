package workflows_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
	"github.com/capstanhq/capstan/tool"
)

// A task takes the limits it leaves unset from the worker that runs its
// first step, and every model attempt and activity timeout reads the
// settled value: here the task sets the idle timeout, the worker the rest.
func TestTaskTakesUnsetLimitsFromTheWorker(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(workerWithLimits(t, model.Limits{
		Idle: 40 * time.Second, FirstEvent: 50 * time.Second, Total: 3 * time.Minute, HeartbeatTimeout: 9 * time.Second,
	}))
	var seen model.Limits
	var heartbeat time.Duration
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			seen = in.Limits
			return contract.ModelTurnResult{Transcript: "sha256:00", Text: "done"}, nil
		})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		heartbeat = info.HeartbeatTimeout
	})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T1", Tenant: "default", Prompt: "p", Model: "openai:m",
		ModelLimits: model.Limits{Idle: 20 * time.Second}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := model.Limits{Idle: 20 * time.Second, FirstEvent: 50 * time.Second, Total: 3 * time.Minute, HeartbeatTimeout: 9 * time.Second}
	if seen != want {
		t.Errorf("the model attempt ran with %+v, want %+v (the task's idle timeout, the worker's rest)", seen, want)
	}
	if heartbeat != want.HeartbeatTimeout {
		t.Errorf("the attempt's heartbeat timeout = %s, want the worker's %s", heartbeat, want.HeartbeatTimeout)
	}
	var journal []string
	v, err := env.QueryWorkflow(workflows.QueryJournal)
	if err != nil || v.Get(&journal) != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(journal, "\n"), "model limits: idle 20s, first event 50s, attempt 3m0s, heartbeat 9s (the task set idle; the rest are the worker's)") {
		t.Errorf("journal does not say which limits the task runs with:\n%s", strings.Join(journal, "\n"))
	}
}

// A task whose own limits do not fit with the worker's defaults ends
// invalid_limits before any model attempt.
func TestTaskLimitsThatDoNotFitTheWorkerFail(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(workerWithLimits(t, model.Limits{Idle: 10 * time.Second, Total: time.Minute}))
	attempts := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			attempts++
			return contract.ModelTurnResult{Transcript: "sha256:00", Text: "done"}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T1", Tenant: "default", Prompt: "p", Model: "openai:m",
		ModelLimits: model.Limits{Idle: 2 * time.Minute}})
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != string(workflows.FailInvalidLimits) {
		t.Fatalf("workflow error = %v, want %s", err, workflows.FailInvalidLimits)
	}
	if !strings.Contains(appErr.Error(), "the idle timeout (2m0s) must be shorter than the attempt's total limit (1m0s)") {
		t.Errorf("message = %q", appErr.Error())
	}
	if attempts != 0 {
		t.Errorf("%d model attempts were made, want none", attempts)
	}
}

// workerWithLimits is a worker's activities whose default limits are l, on
// a real SQLite ledger.
func workerWithLimits(t *testing.T, l model.Limits) *activities.Activities {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	acts, err := activities.New(activities.Deps{Ledger: store, Tools: tool.NewRegistry(), Identity: "worker-1", ModelLimits: l})
	if err != nil {
		t.Fatal(err)
	}
	return acts
}
