package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Tool calls as a model turn commits them.
var (
	prCall = contract.ToolCallRef{ID: "call_pr", Name: "github_create_pull_request", Class: "conditional",
		BusinessKey: "pr:create:acme/app:feat:main", Arguments: "sha256:01", Summary: "create_pull_request acme/app feat → main"}
	commentCall = contract.ToolCallRef{ID: "call_comment", Name: "github_comment", Class: "unsafe",
		Arguments: "sha256:03", Summary: "comment on acme/app#1"}
	readCall = contract.ToolCallRef{ID: "call_read", Name: "github_get_file", Class: "read_only",
		Arguments: "sha256:02", Summary: "get_file acme/app README.md"}
)

// attemptErr is a ModelTurn failure as the activity reports it.
func attemptErr(outcome model.Outcome, msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeModelAttempt, nil,
		contract.AttemptReport{Outcome: outcome, Phase: model.PhaseHeadersReceived, HTTPStatus: 400, Message: msg})
}

// modelFails makes every model attempt fail with err.
func modelFails(err error) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(contract.ModelTurnResult{}, err)
	}
}

// callsThenAnswers: the first turn declares call, the next answers "done".
func callsThenAnswers(call contract.ToolCallRef) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
				if in.Transcript == "" {
					return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:10", ToolCalls: []contract.ToolCallRef{call}}, nil
				}
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:11", Text: "done"}, nil
			})
	}
}

func toolFails(call contract.ToolCallRef, err error) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(call)(env)
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{}, err)
	}
}

// reconciles: the pull request's execution ends with err, and every
// reconciliation answers verdict; an execution after absent ends with err
// again.
func reconciles(err error, verdict capstan.Verdict) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		toolFails(prCall, err)(env)
		env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(reconciled(verdict), nil)
	}
}

func reconciled(v capstan.Verdict) contract.ReconcileResult {
	r := contract.ReconcileResult{Verdict: v}
	switch v {
	case capstan.VerdictFound:
		r.State, r.ExternalID, r.Item, r.Reason = capstan.OutcomeSucceeded, "https://github.com/acme/app/pull/7", "sha256:30", "the pull request was there"
	case capstan.VerdictAbsent:
		r.State, r.Reason = capstan.OutcomeAbsent, "no pull request for feat → main"
	case capstan.VerdictIndeterminate:
		r.State, r.Reason = capstan.OutcomeNeedsHuman, "two pull requests match"
	}
	return r
}

// reconcilesAbsentThenSucceeds: the first n executions are unknown, each
// confirmed absent, and the next succeeds.
func reconcilesAbsentThenSucceeds(n int) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(prCall)(env)
		executions := 0
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
			func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
				executions++
				if executions <= n {
					return contract.ExecuteToolResult{}, temporal.NewNonRetryableApplicationError("timeout after send", contract.ErrTypeOperationUnknown, nil)
				}
				return contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, ExternalID: "https://github.com/acme/app/pull/8", Item: "sha256:20"}, nil
			})
		env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(reconciled(capstan.VerdictAbsent), nil)
	}
}

// deliveryReconciles: the delivery ends with err every time, and every
// reconciliation answers verdict.
func deliveryReconciles(err error, verdict capstan.Verdict) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		deliveryFails(err)(env)
		r := contract.ReconcileResult{Verdict: verdict, Reason: "no message with the operation id"}
		if verdict == capstan.VerdictFound {
			r.State, r.ExternalID, r.Reason = capstan.OutcomeSucceeded, "C1/1700000000.000100", "the message was there"
		}
		env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(r, nil)
	}
}

// deliveryAbsentThenPosted: the first n sends of the delivery end unknown
// and are confirmed absent; the next one is posted.
func deliveryAbsentThenPosted(n int) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(readCall)(env)
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
			contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
		sends := 0
		env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(
			func(context.Context, contract.DeliverInput) (contract.DeliverResult, error) {
				sends++
				if sends <= n {
					return contract.DeliverResult{}, temporal.NewNonRetryableApplicationError("502 Bad Gateway", contract.ErrTypeOperationUnknown, nil)
				}
				return contract.DeliverResult{ExternalID: "C1/1700000000.000100"}, nil
			})
		env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(reconciled(capstan.VerdictAbsent), nil)
	}
}

func reconcilerFails(err error) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		toolFails(prCall, err)(env)
		env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(contract.ReconcileResult{},
			temporal.NewNonRetryableApplicationError("GitHub kept answering 502", "ReconcilerBroken", nil))
	}
}

// breakerOpen is a BreakerOpen error as ExecuteTool and Deliver return it.
func breakerOpen(key string, wait time.Duration) error {
	return temporal.NewApplicationErrorWithOptions("breaker "+key+" is open: nothing was sent", contract.ErrTypeBreakerOpen,
		temporal.ApplicationErrorOptions{NextRetryDelay: wait, Details: []any{contract.BreakerWait{Breaker: key, State: "open", Wait: wait}}})
}

// modelBreakerOpenThen: the first n attempts find model/openai open, 24 s
// left; then the model answers.
func modelBreakerOpenThen(n int) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		calls := 0
		env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
				if calls++; calls <= n {
					return contract.ModelTurnResult{}, temporal.NewNonRetryableApplicationError("breaker open", contract.ErrTypeModelAttempt, nil,
						contract.AttemptReport{AttemptID: in.AttemptID, Outcome: model.OutcomeBreakerOpen, Phase: model.PhaseNotSent,
							RetryAfterMS: 24000, Breaker: "model/openai", Message: "breaker model/openai is open"})
				}
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:11", Text: "done"}, nil
			})
	}
}

// toolBreakerOpenThen: the pull request finds github/write open n times
// (more than the activity's attempts), then it is opened.
func toolBreakerOpenThen(n int) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(prCall)(env)
		calls := 0
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
			func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
				if calls++; calls <= n {
					return contract.ExecuteToolResult{}, breakerOpen("github/write", 30*time.Second)
				}
				return contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, ExternalID: "https://github.com/acme/app/pull/9", Item: "sha256:20"}, nil
			})
	}
}

// deliveryBreakerOpenThen: the delivery finds slack/post open n times, then
// it is posted.
func deliveryBreakerOpenThen(n int) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(readCall)(env)
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
			contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
		calls := 0
		env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(
			func(context.Context, contract.DeliverInput) (contract.DeliverResult, error) {
				if calls++; calls <= n {
					return contract.DeliverResult{}, breakerOpen("slack/post", 30*time.Second)
				}
				return contract.DeliverResult{ExternalID: "C1/1700000000.000100"}, nil
			})
	}
}

func deliveryFails(err error) func(*testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		callsThenAnswers(readCall)(env)
		env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
			contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
		env.OnActivity(a.Deliver, mock.Anything, mock.Anything).Return(contract.DeliverResult{}, err)
	}
}

// TestFailureMapping pins how every way an activity can fail ends the task:
// its status and failure code, the state of the operation or delivery it
// concerned, and the journal line that says why. A changed mapping fails
// here.
func TestFailureMapping(t *testing.T) {
	t.Parallel()
	appErr := func(typ string) error {
		return temporal.NewNonRetryableApplicationError(typ+" from the activity", typ, nil)
	}
	heartbeatTimeout := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	startToCloseTimeout := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)

	tests := []struct {
		name     string
		setup    func(*testsuite.TestWorkflowEnvironment)
		maxTurns int
		cancel   bool
		v2       bool // a task started before changeReconcileUnknown
		v3early  bool // a task started before changeWorkflowWaitsOutBreakers
		v4early  bool // a task started before changeFullTurnGuard
		status   workflows.Status
		code     workflows.FailureCode
		opState  capstan.Outcome // of the one operation, when set
		delivery capstan.Outcome // of the one delivery, when set
		journal  string          // a journal line contains it
	}{
		// Model attempts, decided by the turn guard.
		{name: "rejected attempt", setup: modelFails(attemptErr(model.OutcomeRejected, "bad key")),
			status: workflows.StatusFailed, code: workflows.FailProviderRejected, journal: "abandoned (rejected); giving up"},
		{name: "attempt over its total limit", setup: modelFails(attemptErr(model.OutcomeCutTotal, "ran past 10m")),
			status: workflows.StatusFailed, code: workflows.FailModelMaxDuration, journal: "abandoned (cut_total); giving up"},
		{name: "stream idle twice", setup: modelFails(attemptErr(model.OutcomeCutIdle, "silent for 2m")),
			status: workflows.StatusFailed, code: workflows.FailModelIdleTimeout, journal: "a2 abandoned (cut_idle); giving up"},
		{name: "invalid output past its budget", setup: modelFails(attemptErr(model.OutcomeInvalid, "no finish reason")),
			status: workflows.StatusFailed, code: workflows.FailModelInvalidOutput, journal: "a3 abandoned (invalid); giving up"},
		{name: "before model-turns-complete: context overflow fails at once", v4early: true, setup: modelFails(attemptErr(model.OutcomeOverflow, "too long")),
			status: workflows.StatusFailed, code: workflows.FailContextOverflow, journal: "abandoned (overflow); giving up"},
		{name: "overloaded past its budget", setup: modelFails(attemptErr(model.OutcomeOverloaded, "529")),
			status: workflows.StatusFailed, code: workflows.FailProviderUnavailable, journal: "a6 abandoned (overloaded); giving up"},
		{name: "never sent past the transport budget", setup: modelFails(attemptErr(model.OutcomeNotSent, "connection refused")),
			status: workflows.StatusFailed, code: workflows.FailProviderUnavailable, journal: "a5 abandoned (not_sent); giving up"},
		{name: "model worker misconfigured", setup: modelFails(appErr(contract.ErrTypeWorkerConfig)),
			status: workflows.StatusFailed, code: workflows.FailWorkerMisconfigured, journal: "task failed: WorkerConfig from the activity"},
		{name: "model heartbeat timeout", setup: modelFails(heartbeatTimeout),
			status: workflows.StatusFailed, code: workflows.FailWorkerLost, journal: "a5 abandoned (worker_lost); giving up"},
		{name: "model start-to-close timeout", setup: modelFails(startToCloseTimeout),
			status: workflows.StatusFailed, code: workflows.FailWorkerLost, journal: "StartToClose timeout"},
		{name: "no answer within max turns", setup: func(env *testsuite.TestWorkflowEnvironment) {
			env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(contract.ModelTurnResult{Transcript: "sha256:10", ToolCalls: []contract.ToolCallRef{readCall}}, nil)
			env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
		}, maxTurns: 2, status: workflows.StatusFailed, code: workflows.FailMaxTurns, journal: "had not given a final answer after 2 turns"},

		// Operations.
		{name: "operation conflict", setup: toolFails(prCall, appErr(contract.ErrTypeOperationConflict)),
			status: workflows.StatusFailed, code: workflows.FailOperationConflict, opState: capstan.OutcomeFailed, journal: "task failed: OperationConflict"},
		{name: "v2: operation unknown", v2: true, setup: toolFails(prCall, appErr(contract.ErrTypeOperationUnknown)),
			status: workflows.StatusFailed, code: workflows.FailOperationUnknown, opState: capstan.OutcomeUnknown, journal: "task failed: OperationUnknown"},
		{name: "tool worker misconfigured", setup: toolFails(prCall, appErr(contract.ErrTypeWorkerConfig)),
			status: workflows.StatusFailed, code: workflows.FailWorkerMisconfigured, opState: capstan.OutcomeAbsent, journal: "task failed: WorkerConfig"},
		{name: "read that keeps failing", setup: toolFails(readCall, errors.New("502 from GitHub")),
			status: workflows.StatusFailed, code: workflows.FailOperationFailed, opState: capstan.OutcomeFailed, journal: "github_get_file did not complete"},
		{name: "v2: mutation whose worker is lost", v2: true, setup: toolFails(prCall, heartbeatTimeout),
			status: workflows.StatusFailed, code: workflows.FailOperationUnknown, opState: capstan.OutcomeUnknown, journal: "could not be confirmed and may have taken effect"},
		{name: "v2: mutation held elsewhere to the end", v2: true, setup: toolFails(prCall, temporal.NewApplicationError("held", contract.ErrTypeOperationInProgress)),
			status: workflows.StatusFailed, code: workflows.FailOperationUnknown, opState: capstan.OutcomeUnknown, journal: "could not be confirmed"},

		// Unknown operations, reconciled.
		{name: "unknown, then found", setup: reconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictFound),
			status: workflows.StatusCompleted, opState: capstan.OutcomeSucceeded, journal: "recovered: the pull request was there"},
		{name: "lost worker, then found", setup: reconciles(heartbeatTimeout, capstan.VerdictFound),
			status: workflows.StatusCompleted, opState: capstan.OutcomeSucceeded, journal: "is unknown; reconciling"},
		{name: "unknown, absent, executed again", setup: reconcilesAbsentThenSucceeds(1),
			status: workflows.StatusCompleted, opState: capstan.OutcomeSucceeded, journal: "executing it again with the same id (1/2)"},
		{name: "absent every time: the dependency is down, no person asked", setup: reconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictAbsent),
			status: workflows.StatusFailed, code: workflows.FailDependencyUnavailable, opState: capstan.OutcomeAbsent, journal: "github keeps failing; executing it again with the same id in"},
		{name: "unsafe write absent every time: its list may lag, a person decides", setup: func(env *testsuite.TestWorkflowEnvironment) {
			toolFails(commentCall, appErr(contract.ErrTypeOperationUnknown))(env)
			env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).Return(reconciled(capstan.VerdictAbsent), nil)
		}, status: workflows.StatusFailed, code: workflows.FailNeedsHumanTimeout, opState: capstan.OutcomeNeedsHuman, journal: "executed 2 more times and is still not confirmed"},
		{name: "absent five times, then executed", setup: reconcilesAbsentThenSucceeds(5),
			status: workflows.StatusCompleted, opState: capstan.OutcomeSucceeded, journal: "(execution 5; gives up at"},
		{name: "indeterminate, nobody answers", setup: reconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictIndeterminate),
			status: workflows.StatusFailed, code: workflows.FailNeedsHumanTimeout, opState: capstan.OutcomeNeedsHuman, journal: "needs a person: two pull requests match"},
		{name: "reconciler fails, nobody answers", setup: reconcilerFails(appErr(contract.ErrTypeOperationUnknown)),
			status: workflows.StatusFailed, code: workflows.FailNeedsHumanTimeout, opState: capstan.OutcomeNeedsHuman, journal: "the reconciler could not finish"},

		// Deliveries.
		{name: "delivery refused", setup: deliveryFails(appErr(contract.ErrTypeDeliveryFailed)),
			status: workflows.StatusFailed, code: workflows.FailDeliveryFailed, delivery: capstan.OutcomeFailed, journal: "could not be delivered to Slack"},
		{name: "v2: delivery unknown", v2: true, setup: deliveryFails(appErr(contract.ErrTypeOperationUnknown)),
			status: workflows.StatusFailed, code: workflows.FailOperationUnknown, delivery: capstan.OutcomeUnknown, journal: "may have been posted"},
		{name: "delivery conflict", setup: deliveryFails(appErr(contract.ErrTypeOperationConflict)),
			status: workflows.StatusFailed, code: workflows.FailOperationConflict, delivery: capstan.OutcomeFailed, journal: "task failed: OperationConflict"},
		{name: "delivery worker misconfigured", setup: deliveryFails(appErr(contract.ErrTypeWorkerConfig)),
			status: workflows.StatusFailed, code: workflows.FailWorkerMisconfigured, delivery: capstan.OutcomeFailed, journal: "task failed: WorkerConfig"},
		{name: "delivery unknown, then found", setup: deliveryReconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictFound),
			status: workflows.StatusCompleted, delivery: capstan.OutcomeSucceeded, journal: "recovered: the message was there"},
		{name: "delivery's worker lost, then found", setup: deliveryReconciles(heartbeatTimeout, capstan.VerdictFound),
			status: workflows.StatusCompleted, delivery: capstan.OutcomeSucceeded, journal: "stopped answering (Heartbeat timeout)"},
		{name: "delivery absent every time: slack keeps failing, dead-lettered at the outage limit", setup: deliveryReconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictAbsent),
			status: workflows.StatusFailed, code: workflows.FailDeliveryFailed, delivery: capstan.OutcomeFailed, journal: "slack keeps failing; executing it again with the same id in"},
		{name: "before absent-deliveries-retried: delivery absent every time, dead-lettered after 3 tries", setup: func(env *testsuite.TestWorkflowEnvironment) {
			deliveryReconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictAbsent)(env)
			env.OnGetVersion("absent-deliveries-retried", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
		}, status: workflows.StatusFailed, code: workflows.FailDeliveryFailed, delivery: capstan.OutcomeFailed, journal: "after 3 tries"},
		{name: "delivery absent four times, then posted", setup: deliveryAbsentThenPosted(4),
			status: workflows.StatusCompleted, delivery: capstan.OutcomeSucceeded, journal: "(execution 4; gives up at"},
		{name: "delivery indeterminate, nobody answers", setup: deliveryReconciles(appErr(contract.ErrTypeOperationUnknown), capstan.VerdictIndeterminate),
			status: workflows.StatusFailed, code: workflows.FailNeedsHumanTimeout, delivery: capstan.OutcomeNeedsHuman, journal: "needs a person"},
		{name: "delivery not sent three times", setup: deliveryFails(temporal.NewApplicationError("ratelimited", contract.ErrTypeDeliveryNotSent)),
			status: workflows.StatusFailed, code: workflows.FailDeliveryFailed, delivery: capstan.OutcomeFailed, journal: "could not be delivered to Slack"},

		// Open breakers: waited out, however long, spending no budget.
		{name: "model breaker open, waited out", setup: modelBreakerOpenThen(12),
			status: workflows.StatusCompleted, journal: "for breaker model/openai: model attempt T/~3c4e2731fc30/t1/a12 was not sent (no retry budget spent)"},
		{name: "tool breaker open past the activity's attempts, waited out", setup: toolBreakerOpenThen(8),
			status: workflows.StatusCompleted, opState: capstan.OutcomeSucceeded,
			journal: "waiting 30s for breaker github/write: operation default:T:~3c4e2731fc30:github_create_pull_request:pr:create:acme/app:feat:main (github_create_pull_request) was not sent"},
		{name: "delivery breaker open past its tries, waited out", setup: deliveryBreakerOpenThen(5),
			status: workflows.StatusCompleted, delivery: capstan.OutcomeSucceeded, journal: "waiting 30s for breaker slack/post: delivery default:T:~3c4e2731fc30:deliver:slack:#eng was not sent"},
		{name: "before breaker waits: model breaker_open has no row", v3early: true, setup: modelBreakerOpenThen(1),
			status: workflows.StatusFailed, code: workflows.FailProviderUnavailable, journal: "a1 abandoned (breaker_open); giving up"},
		{name: "before breaker waits: a read kept open is failed", v3early: true, setup: func(env *testsuite.TestWorkflowEnvironment) {
			toolFails(readCall, breakerOpen("github/read", time.Second))(env)
		}, status: workflows.StatusFailed, code: workflows.FailOperationFailed, opState: capstan.OutcomeFailed, journal: "github_get_file did not complete"},

		// Cancellation while a model attempt runs.
		{name: "cancelled", cancel: true, setup: func(env *testsuite.TestWorkflowEnvironment) {
			env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).After(time.Hour).Return(contract.ModelTurnResult{}, nil)
		}, status: workflows.StatusCancelled, journal: "task cancelled: the task was cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Activities{})
			tt.setup(env)
			if tt.v2 || tt.v3early || tt.v4early { // a task started before changeAllThroughWorkerLimits
				env.OnGetVersion("all-changes-v7", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
				env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
			}
			if tt.v2 {
				env.OnGetVersion("reconcile-unknown-operations", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			if tt.v2 || tt.v3early {
				env.OnGetVersion("breaker-waits", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			if tt.v4early {
				env.OnGetVersion("model-turns-complete", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			if tt.cancel {
				env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
			}
			in := workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", MaxTurns: tt.maxTurns}
			if tt.delivery != "" {
				in.SlackChannel = "#eng"
			}
			env.ExecuteWorkflow(workflows.AgentTask, in)
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow did not complete")
			}
			var res workflows.TaskResult
			if err := env.GetWorkflowError(); err == nil {
				if err := env.GetWorkflowResult(&res); err != nil {
					t.Fatal(err)
				}
			} else {
				res = taskResult(t, err)
			}
			if res.Status != tt.status || res.FailureCode != tt.code {
				t.Fatalf("status, code = %s, %q (%s); want %s, %q", res.Status, res.FailureCode, res.Message, tt.status, tt.code)
			}
			if tt.code != "" && res.Message == "" {
				t.Error("a failed task carries no readable sentence")
			}
			if tt.opState != "" && (len(res.Operations) != 1 || res.Operations[0].State != tt.opState) {
				t.Errorf("operations = %+v, want one %s", res.Operations, tt.opState)
			}
			if tt.delivery != "" && (len(res.Deliveries) != 1 || res.Deliveries[0].State != tt.delivery) {
				t.Errorf("deliveries = %+v, want one %s", res.Deliveries, tt.delivery)
			}
			v, err := env.QueryWorkflow(workflows.QueryJournal)
			if err != nil {
				t.Fatal(err)
			}
			var journal []string
			if err := v.Get(&journal); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(journal, "\n"), tt.journal) {
				t.Errorf("journal has no line with %q:\n%s", tt.journal, strings.Join(journal, "\n"))
			}
		})
	}
}

// taskResult reads the TaskResult a failed or cancelled task carries in its
// error, as starter does; the workflow error's type is the failure code.
func taskResult(t *testing.T, err error) workflows.TaskResult {
	t.Helper()
	var res workflows.TaskResult
	var appErr *temporal.ApplicationError
	var canErr *temporal.CanceledError
	switch {
	case errors.As(err, &appErr):
		if err := appErr.Details(&res); err != nil {
			t.Fatal(err)
		}
		if appErr.Type() != string(res.FailureCode) {
			t.Errorf("workflow error type %q, result code %q: want them equal", appErr.Type(), res.FailureCode)
		}
	case errors.As(err, &canErr):
		if err := canErr.Details(&res); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("workflow error = %v, want a failed or cancelled task", err)
	}
	return res
}
