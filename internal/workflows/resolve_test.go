package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

const prOpID = "default:T:~3c4e2731fc30:github_create_pull_request:pr:create:acme/app:feat:main"

// personEnv is a task whose pull request nobody can settle: its execution
// is unknown and the reconciler answers indeterminate until a person's
// resolution arrives, which it then records.
// A nil execute makes every execution unknown.
func personEnv(t *testing.T, execute func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error)) (*testsuite.TestWorkflowEnvironment, *[]contract.ReconcileInput) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	callsThenAnswers(prCall)(env)
	if execute == nil {
		execute = func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			return contract.ExecuteToolResult{}, temporal.NewNonRetryableApplicationError("timeout after send", contract.ErrTypeOperationUnknown, nil)
		}
	}
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(execute)
	var asked []contract.ReconcileInput
	env.OnActivity(a.Reconcile, mock.Anything, mock.Anything).After(30 * time.Minute).Return(
		func(_ context.Context, in contract.ReconcileInput) (contract.ReconcileResult, error) {
			asked = append(asked, in)
			if in.Resolution == nil {
				return reconciled(capstan.VerdictIndeterminate), nil
			}
			r := reconciled(in.Resolution.Verdict)
			r.ExternalID = in.Resolution.ExternalID
			return r, nil
		})
	return env, &asked
}

// resolveAt sends the resolve update after d and reports how it ended.
func resolveAt(env *testsuite.TestWorkflowEnvironment, d time.Duration, req workflows.ResolveRequest, got *error) {
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateResolve, req.OperationID+req.Decision+req.URL, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { *got = err },
			OnComplete: func(_ any, err error) { *got = err },
		}, req)
	}, d)
}

// A person's "found" settles the operation as recovered and the task goes
// on; every malformed or misdirected resolution before it is refused and
// changes nothing.
func TestPersonResolvesFound(t *testing.T) {
	t.Parallel()
	env, asked := personEnv(t, nil)
	bad := []struct {
		req  workflows.ResolveRequest
		want string
	}{
		{workflows.ResolveRequest{OperationID: "nope", Decision: "found", URL: "https://x/y"}, `has no operation "nope"`},
		{workflows.ResolveRequest{OperationID: prOpID, Decision: "maybe"}, "must be found, absent or abort"},
		{workflows.ResolveRequest{OperationID: prOpID, Decision: "found"}, "needs the http(s) URL"},
		{workflows.ResolveRequest{OperationID: prOpID, Decision: "found", URL: "github.com/acme/app/pull/7"}, "needs the http(s) URL"},
		{workflows.ResolveRequest{OperationID: prOpID, Decision: "absent", URL: "https://x/y"}, "only found takes a URL"},
	}
	errs := make([]error, len(bad))
	for i, b := range bad {
		resolveAt(env, time.Hour+time.Duration(i)*time.Minute, b.req, &errs[i])
	}
	var okErr error = errors.New("never answered")
	resolveAt(env, 2*time.Hour, workflows.ResolveRequest{OperationID: prOpID, Decision: "found", URL: "https://github.com/acme/app/pull/7"}, &okErr)
	var earlyErr error // while the reconciler still asks
	resolveAt(env, 10*time.Minute, workflows.ResolveRequest{OperationID: prOpID, Decision: "absent"}, &earlyErr)

	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	for i, b := range bad {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), b.want) {
			t.Errorf("resolve %+v: %v, want refused with %q", b.req, errs[i], b.want)
		}
	}
	if okErr != nil {
		t.Fatalf("a valid resolution: %v", okErr)
	}
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	op := res.Operations[0]
	if res.Status != workflows.StatusCompleted || op.State != capstan.OutcomeSucceeded || !op.Recovered || op.ExternalID != "https://github.com/acme/app/pull/7" {
		t.Fatalf("result = %+v, want completed with the operation recovered at the person's URL", res)
	}
	if len(*asked) != 2 || (*asked)[1].Resolution == nil || (*asked)[1].Resolution.Verdict != capstan.VerdictFound {
		t.Errorf("reconcile calls = %+v, want one asking and one recording the person's found", *asked)
	}
	if earlyErr == nil || !strings.Contains(earlyErr.Error(), "is unknown and needs no person") {
		t.Errorf("a resolution while the reconciler still asks: %v, want refused as needing no person", earlyErr)
	}
}

// A person's "absent" earns one more execution with the same id.
func TestPersonResolvesAbsent(t *testing.T) {
	t.Parallel()
	executions := 0
	env, _ := personEnv(t, func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
		executions++
		if in.OperationID != prOpID {
			t.Errorf("execution with id %s, want %s", in.OperationID, prOpID)
		}
		if executions == 1 {
			return contract.ExecuteToolResult{}, temporal.NewNonRetryableApplicationError("timeout after send", contract.ErrTypeOperationUnknown, nil)
		}
		return contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, ExternalID: "https://github.com/acme/app/pull/9", Item: "sha256:20"}, nil
	})
	var err error
	resolveAt(env, time.Hour, workflows.ResolveRequest{OperationID: prOpID, Decision: "absent"}, &err)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	var res workflows.TaskResult
	if werr := env.GetWorkflowResult(&res); werr != nil || err != nil {
		t.Fatalf("workflow %v, update %v", werr, err)
	}
	if executions != 2 || res.Operations[0].State != capstan.OutcomeSucceeded || res.Operations[0].Recovered {
		t.Errorf("executions %d, operation %+v; want 2 executions and a plain success", executions, res.Operations[0])
	}
}

// A person's "abort" ends the task with its own code.
func TestPersonAborts(t *testing.T) {
	t.Parallel()
	env, _ := personEnv(t, nil)
	var err error
	resolveAt(env, time.Hour, workflows.ResolveRequest{OperationID: prOpID, Decision: "abort"}, &err)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if err != nil {
		t.Fatal(err)
	}
	res := taskResult(t, env.GetWorkflowError())
	if res.FailureCode != workflows.FailOperationAborted || res.Operations[0].State != capstan.OutcomeNeedsHuman {
		t.Errorf("result = %+v, want operation_aborted with the operation still NEEDS_HUMAN", res)
	}
}

// The wait for a person is bounded by the task's human timeout.
func TestHumanTimeout(t *testing.T) {
	t.Parallel()
	env, _ := personEnv(t, nil)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", HumanTimeout: 90 * time.Minute})
	res := taskResult(t, env.GetWorkflowError())
	if res.FailureCode != workflows.FailNeedsHumanTimeout || !strings.Contains(res.Message, "1h30m0s") {
		t.Errorf("result = %s %q, want needs_human_timeout after 1h30m0s", res.FailureCode, res.Message)
	}
}

// Two people resolve at the same instant and a third comes later: the
// first resolution stands, the others are told who resolved it, and the
// result records the name. (The test environment runs each update's
// validator and handler in turn, so here the validator refuses bob; the
// handler's own check, for updates whose validators all ran before any
// handler, is exercised on a real server by the e2e
// TestSecondResolverIsToldWhoResolved.)
func TestSecondResolverIsRefused(t *testing.T) {
	env, asked := personEnv(t, nil)
	errs := map[string]error{"alice": errors.New("never answered"), "bob": errors.New("never answered"), "carol": errors.New("never answered")}
	send := func(who, decision, url string) {
		req := workflows.ResolveRequest{OperationID: prOpID, Decision: decision, URL: url, ResolvedBy: who}
		env.UpdateWorkflow(workflows.UpdateResolve, who, &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { errs[who] = err },
			OnComplete: func(_ any, err error) { errs[who] = err },
		}, req)
	}
	env.RegisterDelayedCallback(func() {
		send("alice", "found", "https://github.com/acme/app/pull/7")
		send("bob", "absent", "")
	}, time.Hour)
	env.RegisterDelayedCallback(func() { send("carol", "absent", "") }, time.Hour+10*time.Minute)

	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	if errs["alice"] != nil {
		t.Fatalf("alice's resolution: %v", errs["alice"])
	}
	for _, who := range []string{"bob", "carol"} {
		if errs[who] == nil || !strings.Contains(errs[who].Error(), "already resolved by alice (found https://github.com/acme/app/pull/7)") {
			t.Errorf("%s's resolution: %v, want refused as already resolved by alice", who, errs[who])
		}
	}
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if op := res.Operations[0]; res.Status != workflows.StatusCompleted || op.State != capstan.OutcomeSucceeded || op.ResolvedBy != "alice" {
		t.Fatalf("result = %+v, want completed, the operation found and resolved by alice", res)
	}
	if n := len(*asked); n != 2 || (*asked)[1].Resolution.ResolvedBy != "alice" {
		t.Errorf("reconcile calls = %+v, want one asking and one recording alice's found", *asked)
	}
}
