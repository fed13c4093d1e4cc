package workflows_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// refusingTask runs a task whose model asks for one write a turn, answering
// after answerAfter turns, and whose every ExecuteTool reports a refusal by
// default/base-branch. It returns the task's result and the policy
// contexts ExecuteTool was given.
func refusingTask(t *testing.T, in workflows.AgentTaskInput, answerAfter int) (workflows.TaskResult, []*contract.TaskPolicy, []string) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	put := contract.ToolCallRef{ID: "call", Name: "github_put_file", Class: "idempotent", Arguments: "sha256:put", Summary: "put_file"}
	turns := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			turns++
			if turns > answerAfter {
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:99", Text: "done"}, nil
			}
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:1" + strings.Repeat("0", turns), ToolCalls: []contract.ToolCallRef{put}}, nil
		})
	var mu sync.Mutex
	var given []*contract.TaskPolicy
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			mu.Lock()
			given = append(given, in.Policy)
			mu.Unlock()
			return contract.ExecuteToolResult{OperationID: in.OperationID, State: capstan.OutcomeFailed, Item: "sha256:20",
				Decision: &contract.PolicyDecision{Effect: "deny", Rule: "default/base-branch", Reason: "main is this task's base branch", Refused: true}}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, in)
	// A failed task ends with an error; its result is its status.
	_ = env.GetWorkflowError()
	var res workflows.TaskResult
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	var journal []string
	if v, err := env.QueryWorkflow(workflows.QueryJournal); err == nil {
		_ = v.Get(&journal)
	}
	return res, given, journal
}

// A task given no policy context by its starter decides with the defaults'
// context derived from its input; its refusals are journalled and recorded
// on their operations, and the third (the default limit) fails the task
// policy_violation: no fourth call is made.
func TestRefusalLimitFailsPolicyViolation(t *testing.T) {
	t.Parallel()
	res, given, journal := refusingTask(t, workflows.AgentTaskInput{TaskID: "P1", Tenant: "default", Prompt: "p", Model: "openai:m",
		Repo: "acme/app", Base: "main", Comments: []contract.CommentTarget{{Repo: "acme/issues", Number: 4}, {Repo: "Acme/App", Number: 5}}}, 10)
	if res.Status != workflows.StatusFailed || res.FailureCode != workflows.FailPolicyViolation || !strings.Contains(res.Message, "refused 3 of its tool calls") {
		t.Errorf("result %s %s %q, want failed policy_violation after 3 refusals", res.Status, res.FailureCode, res.Message)
	}
	if len(given) != 3 {
		t.Fatalf("ExecuteTool ran %d times, want 3", len(given))
	}
	want := &contract.TaskPolicy{Repositories: []string{"acme/app", "acme/issues"}, Base: "main", Tenant: "default"}
	if !reflect.DeepEqual(given[0], want) {
		t.Errorf("policy context = %+v, want %+v", given[0], want)
	}
	for _, op := range res.Operations {
		if op.State != capstan.OutcomeFailed || op.PolicyRule != "default/base-branch" || !strings.Contains(op.Reason, "refused by default/base-branch") {
			t.Errorf("operation %+v, want failed, refused by default/base-branch", op)
		}
	}
	n := 0
	for _, l := range journal {
		if strings.Contains(l, "policy: github_put_file deny by default/base-branch: main is this task's base branch") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("journal has %d policy lines, want 3:\n%s", n, strings.Join(journal, "\n"))
	}
}

// Below its limit (--max-refusals 3 here, two refusals) the task goes on
// and completes; the limit comes from the starter's policy context.
func TestRefusalsBelowTheLimitLetTheTaskGoOn(t *testing.T) {
	t.Parallel()
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default", MaxRefusals: 3}
	res, given, _ := refusingTask(t, workflows.AgentTaskInput{TaskID: "P2", Tenant: "default", Prompt: "p", Model: "openai:m",
		Repo: "acme/app", Base: "main", Policy: tp}, 2)
	if res.Status != workflows.StatusCompleted || len(given) != 2 || !reflect.DeepEqual(given[0], tp) {
		t.Errorf("result %s %s %q after %d calls (policy %+v), want succeeded after 2 refused calls", res.Status, res.FailureCode, res.Message, len(given), given)
	}
	tp.MaxRefusals = 2
	res, _, _ = refusingTask(t, workflows.AgentTaskInput{TaskID: "P3", Tenant: "default", Prompt: "p", Model: "openai:m",
		Repo: "acme/app", Base: "main", Policy: tp}, 5)
	if res.FailureCode != workflows.FailPolicyViolation || len(res.Operations) != 2 {
		t.Errorf("--max-refusals 2: %s after %d operations, want policy_violation after 2", res.FailureCode, len(res.Operations))
	}
}
