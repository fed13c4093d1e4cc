package workflows_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Cancelling a task marks unknown only what was really in flight: an
// operation whose activity stopped before sending is absent, and nothing is
// reconciled for it. (The test environment answers a cancelled activity at
// once, without waiting for what it reports, so the other half — an
// operation sent and then cancelled is reconciled before the task ends — is
// TestCancelReconcilesWhatWasInFlight in internal/e2e, on a real server.)
func TestCancelMarksUnknownOnlyWhatWasInFlight(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	callsThenAnswers(prCall)(env)
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			env.CancelWorkflow() // the task is cancelled while this call waits to send
			<-ctx.Done()
			return contract.ExecuteToolResult{}, ctx.Err()
		})
	reconciled := 0
	env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.ReconcileInput) (contract.ReconcileResult, error) {
			reconciled++
			return contract.ReconcileResult{}, nil
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

// cancelWhileUnsettled runs a task that the case cancels while an effect's
// outcome is not known yet, and returns its result and every Reconcile it
// asked for. first answers the first Reconcile, the case's way; any later
// one, asked as the cancelled task ends, finds the effect.
func cancelWhileUnsettled(t *testing.T, before bool, setup func(env *testsuite.TestWorkflowEnvironment) (first func(context.Context) (contract.ReconcileResult, error))) (workflows.TaskResult, []contract.ReconcileInput) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	if before {
		env.OnGetVersion("cancel-settles-every-unknown", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
		env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
	}
	first := setup(env)
	var asked []contract.ReconcileInput
	env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in contract.ReconcileInput) (contract.ReconcileResult, error) {
			if asked = append(asked, in); len(asked) == 1 {
				return first(ctx)
			}
			return reconciled(capstan.VerdictFound), nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", SlackChannel: "#eng"})
	return taskResult(t, env.GetWorkflowError()), asked
}

// A cancelled task looks once more for every effect whose outcome is not
// known before it ends — whatever state the cancellation found it in: a
// delivery while a reconciler asked about it (reconciling), an operation
// that waited for a person (needs_human) — so its result lists what is
// known of each. Tasks started before changeCancelSettlesEveryUnknown
// looked only at what was recorded unknown, and replay so.
func TestCancelSettlesEveryEffectNotKnown(t *testing.T) {
	t.Parallel()
	unknown := temporal.NewNonRetryableApplicationError("timeout after the request was written", contract.ErrTypeOperationUnknown, nil)
	deliveryReconciling := func(env *testsuite.TestWorkflowEnvironment) func(context.Context) (contract.ReconcileResult, error) {
		callsThenAnswers(readCall)(env)
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
		env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(contract.DeliverResult{}, unknown)
		return func(ctx context.Context) (contract.ReconcileResult, error) {
			env.CancelWorkflow() // while the reconciler asks Slack
			<-ctx.Done()
			return contract.ReconcileResult{}, ctx.Err()
		}
	}
	operationWaitsForAPerson := func(env *testsuite.TestWorkflowEnvironment) func(context.Context) (contract.ReconcileResult, error) {
		toolFails(prCall, unknown)(env)
		return func(context.Context) (contract.ReconcileResult, error) {
			env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour) // while it waits for a person
			return reconciled(capstan.VerdictIndeterminate), nil
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(*testsuite.TestWorkflowEnvironment) func(context.Context) (contract.ReconcileResult, error)
		// stateOf is the effect's state in the result; was is the state a
		// task started before the change left it in.
		stateOf func(workflows.TaskResult) capstan.Outcome
		was     capstan.Outcome
	}{
		{"delivery reconciling", deliveryReconciling,
			func(r workflows.TaskResult) capstan.Outcome { return r.Deliveries[0].State }, capstan.OutcomeReconciling},
		{"operation waiting for a person", operationWaitsForAPerson,
			func(r workflows.TaskResult) capstan.Outcome { return r.Operations[0].State }, capstan.OutcomeNeedsHuman},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, asked := cancelWhileUnsettled(t, false, tc.setup)
			if res.Status != workflows.StatusCancelled {
				t.Fatalf("status %s, want cancelled", res.Status)
			}
			if len(asked) != 2 || asked[1].Resolution != nil {
				t.Fatalf("Reconcile asked %d times (%+v), want once more as the cancelled task ended", len(asked), asked)
			}
			if got := tc.stateOf(res); got != capstan.OutcomeSucceeded {
				t.Errorf("the effect ends %s, want succeeded: the reconciler found it", got)
			}
			// changeSettleBySending: a running task's tool operation may
			// be sent again by its reconciler; a delivery never, and
			// nothing once the task is cancelled.
			if asked[0].Resend != (asked[0].ToolCallID != "") || asked[1].Resend {
				t.Errorf("Resend = %v before the cancel (tool call %q), %v after; want true only for a running task's tool operation",
					asked[0].Resend, asked[0].ToolCallID, asked[1].Resend)
			}
		})
		t.Run(tc.name+", task started before the change", func(t *testing.T) {
			res, asked := cancelWhileUnsettled(t, true, tc.setup)
			if res.Status != workflows.StatusCancelled || len(asked) != 1 || tc.stateOf(res) != tc.was {
				t.Errorf("status %s, Reconcile asked %d times, effect %s; want cancelled, once, %s as before",
					res.Status, len(asked), tc.stateOf(res), tc.was)
			}
		})
	}
}
