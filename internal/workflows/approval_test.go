package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// approvalTask is a task whose model asks for the pull request prCall in
// each of its first asks turns (the same effect each time), then answers,
// and whose ExecuteTool behaves as the activity does for a call that
// requires approval: without an answer it reports awaiting_approval; with
// an approval it sends; with a denial it commits the denial. It returns
// the environment and the inputs ExecuteTool was given.
func approvalTask(t *testing.T, asks int) (*testsuite.TestWorkflowEnvironment, func() []contract.ExecuteToolInput) {
	env, given, _ := approvalTaskWithLedger(t, asks)
	return env, given
}

// fakeLedger is what approvalTask's ExecuteTool answers a LedgerOnly
// request with: State (absent when empty), or Err.
type fakeLedger struct {
	mu    sync.Mutex
	State capstan.Outcome
	Err   error
	asked int
}

func (l *fakeLedger) answer(in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	res := contract.ExecuteToolResult{OperationID: in.OperationID, State: capstan.OutcomeAbsent}
	switch {
	case l.Err != nil:
		return res, l.Err
	case l.State == capstan.OutcomeSucceeded:
		res.State, res.Replayed, res.ExternalID, res.Item = l.State, true, "https://github.com/acme/app/pull/7", "sha256:22"
	}
	return res, nil
}

// prHash is the canonical call's hash approvalTask's ExecuteTool reports.
const prHash = "c0ffee"

// approvalTaskWithLedger is approvalTask with the fake ledger its
// LedgerOnly requests are answered from (not among the inputs given).
func approvalTaskWithLedger(t *testing.T, asks int) (*testsuite.TestWorkflowEnvironment, func() []contract.ExecuteToolInput, *fakeLedger) {
	t.Helper()
	ledger := &fakeLedger{}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	turns := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			turns++
			if turns > asks {
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:99", Text: "done"}, nil
			}
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:1" + strings.Repeat("0", turns), ToolCalls: []contract.ToolCallRef{prCall}}, nil
		})
	var mu sync.Mutex
	var given []contract.ExecuteToolInput
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			if in.LedgerOnly {
				return ledger.answer(in)
			}
			mu.Lock()
			given = append(given, in)
			mu.Unlock()
			d := &contract.PolicyDecision{Effect: "require_approval", Rule: "task/require-approval", Reason: "asked"}
			res := contract.ExecuteToolResult{OperationID: in.OperationID, Decision: d}
			switch {
			case !in.Approvals:
				t.Errorf("ExecuteTool was not told the task can ask for approvals")
			case in.Denial != nil:
				res.State, res.Item, res.Decision = capstan.OutcomeDenied, "sha256:21", nil
			case in.Approval != nil:
				d.Approved = true
				res.State, res.ExternalID, res.Item = capstan.OutcomeSucceeded, "https://github.com/acme/app/pull/7", "sha256:20"
			default:
				res.State = capstan.OutcomeAwaitingApproval
				res.Awaiting = &contract.AwaitingApproval{Summary: "pull request feat → main in acme/app", Effect: "effect-pr", Hash: prHash,
					Call: []contract.CallField{{Name: "title", Value: "Fix", Bytes: 3}}, Arguments: "sha256:01"}
			}
			return res, nil
		})
	return env, func() []contract.ExecuteToolInput {
		mu.Lock()
		defer mu.Unlock()
		return append([]contract.ExecuteToolInput(nil), given...)
	}, ledger
}

// answerAt sends the approve or deny update after d and reports how it
// ended in *got (nil: taken).
func answerAt(env *testsuite.TestWorkflowEnvironment, d time.Duration, update string, req workflows.ApprovalRequest, got *error) {
	*got = errors.New("never answered")
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(update, update+req.By+d.String(), &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { *got = err },
			OnComplete: func(_ any, err error) { *got = err },
		}, req)
	}, d)
}

func statusOf(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.TaskResult {
	t.Helper()
	var res workflows.TaskResult
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// Approved, the operation is executed again with the approval and sent;
// every answer that cannot be taken — a deny without a reason, an unknown
// operation, an answer before it waits or after it was answered — is
// refused with one sentence and changes nothing.
func TestApprovalSendsOnceApproved(t *testing.T) {
	t.Parallel()
	env, given := approvalTask(t, 1)
	var waiting workflows.TaskResult
	env.RegisterDelayedCallback(func() { waiting = statusOf(t, env) }, 30*time.Minute)
	bad := []struct {
		at     time.Duration
		update string
		req    workflows.ApprovalRequest
		want   string
	}{
		{time.Hour, workflows.UpdateDeny, workflows.ApprovalRequest{OperationID: prOpID, By: "bob"}, "deny needs a --reason"},
		{time.Hour, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID}, "needs the name of who gives it"},
		{time.Hour, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: "nope", By: "bob"}, `has no operation "nope"`},
		{2 * time.Hour, workflows.UpdateDeny, workflows.ApprovalRequest{OperationID: prOpID, By: "carol", Reason: "too late"}, "already approved by alice"},
	}
	errs := make([]error, len(bad))
	for i, b := range bad[:len(bad)-1] {
		answerAt(env, b.at+time.Duration(i)*time.Minute, b.update, b.req, &errs[i])
	}
	// alice approves, by an ending of the operation's id, and carol denies
	// in the same instant: the first answer stands, the second is told who
	// gave it. (The test environment runs each update's validator and
	// handler in turn: here carol's validator refuses.)
	var okErr error
	answerAt(env, 2*time.Hour, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: "github_create_pull_request:pr:create:acme/app:feat:main", By: "alice", Note: "lgtm", Hash: prHash, Client: "42@desk@"}, &okErr)
	answerAt(env, 2*time.Hour, workflows.UpdateDeny, bad[len(bad)-1].req, &errs[len(errs)-1])
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app"})
	for i, b := range bad {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), b.want) {
			t.Errorf("%s %+v: %v, want refused with %q", b.update, b.req, errs[i], b.want)
		}
	}
	if okErr != nil {
		t.Fatalf("alice's approval: %v", okErr)
	}
	if op := waiting.Operations[0]; op.State != capstan.OutcomeAwaitingApproval || op.Summary != "pull request feat → main in acme/app" ||
		!strings.Contains(waiting.Waiting, "starter approve T github_create_pull_request:pr:create:acme/app:feat:main --hash "+prHash) || op.CallHash != prHash {
		t.Errorf("while it waits: operation %+v, waiting %q; want awaiting_approval with its summary and the command", op, waiting.Waiting)
	}
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	op := res.Operations[0]
	if res.Status != workflows.StatusCompleted || op.State != capstan.OutcomeSucceeded || op.Approval == nil ||
		op.Approval.Decision != workflows.DecisionApproved || op.Approval.By != "alice" || op.Approval.Note != "lgtm" || op.Approval.Client != "42@desk@" || op.Approval.Hash != prHash {
		t.Fatalf("result = %+v, operation %+v; want completed, the pull request sent as approved by alice", res, op)
	}
	in := given()
	if len(in) != 2 || in[0].Approval != nil || in[1].Approval == nil || in[1].Approval.By != "alice" || in[1].Approval.Hash != prHash || in[1].Denial != nil {
		t.Errorf("ExecuteTool inputs = %+v, want one asking and one carrying alice's approval", in)
	}
}

// Denied, nothing is sent and the model reads the denial; the same effect
// asked again later gets the same denial without anyone being asked, and
// denials do not count toward the refusal limit.
func TestDenialStaysDenied(t *testing.T) {
	t.Parallel()
	env, given := approvalTask(t, 2)
	var err error
	answerAt(env, time.Hour, workflows.UpdateDeny, workflows.ApprovalRequest{OperationID: prOpID, By: "bob", Reason: "not this week"}, &err)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app",
		Policy: &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", MaxRefusals: 1}})
	if err != nil {
		t.Fatalf("bob's denial: %v", err)
	}
	var res workflows.TaskResult
	if werr := env.GetWorkflowResult(&res); werr != nil {
		t.Fatalf("the task failed: %v", werr)
	}
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 2 {
		t.Fatalf("result = %+v, want completed after two operations", res)
	}
	for i, op := range res.Operations {
		if op.State != capstan.OutcomeDenied || op.Reason != "denied by bob: not this week" || op.Approval == nil || op.Approval.Again != (i == 1) || op.PolicyRule != "" {
			t.Errorf("operation %d = %+v, want denied by bob (again: %t), no policy rule", i+1, op, i == 1)
		}
	}
	in := given()
	if len(in) != 4 || in[1].Denial == nil || in[3].Denial == nil || in[3].Denial.By != "bob" || in[3].Denial.Reason != "not this week" {
		t.Errorf("ExecuteTool inputs = %+v, want ask, bob's denial, ask, bob's denial", in)
	}
	if d := statusOf(t, env).Waiting; d != "" {
		t.Errorf("after the task the status still says it waits: %q", d)
	}
}

// Unanswered within the task's approval timeout, the operation is denied
// with the reason that says so.
func TestApprovalTimeoutDenies(t *testing.T) {
	t.Parallel()
	env, given := approvalTask(t, 1)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app",
		ApprovalTimeout: 3 * time.Hour})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if op := res.Operations[0]; op.State != capstan.OutcomeDenied || op.Reason != "denied: no approval within 3h0m0s" {
		t.Errorf("operation = %+v, want denied: no approval within 3h0m0s", op)
	}
	if in := given(); len(in) != 2 || in[1].Denial == nil || in[1].Denial.By != "" || in[1].Denial.Reason != "no approval within 3h0m0s" {
		t.Errorf("ExecuteTool inputs = %+v, want the second carrying the timeout's denial", in)
	}
}

// A task cancelled while its operation awaits approval sends nothing: the
// operation is absent (the ledger, asked, holds nothing of it), and the
// task says it no longer waits.
func TestCancelWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	env, given := approvalTask(t, 1)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app"})
	res := statusOf(t, env)
	if op := res.Operations[0]; res.Status != workflows.StatusCancelled || op.State != capstan.OutcomeAbsent || res.Waiting != "" {
		t.Errorf("status %s, operation %+v, waiting %q; want cancelled, the operation absent, waiting for nothing", res.Status, op, res.Waiting)
	}
	if in := given(); len(in) != 1 {
		t.Errorf("ExecuteTool ran %d times, want once (the ask)", len(in))
	}
}

// A chain started before changeApprovals never asks: its ExecuteTool is
// told so (Approvals false), and a require_approval is refused as before.
func TestChainBeforeApprovalsDoesNotAsk(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	env.OnGetVersion("approvals", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
	callsThenAnswers(prCall)(env)
	var approvals []bool
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			approvals = append(approvals, in.Approvals)
			return contract.ExecuteToolResult{OperationID: in.OperationID, State: capstan.OutcomeFailed, Item: "sha256:20",
				Decision: &contract.PolicyDecision{Effect: "require_approval", Rule: "r", Reason: "asked; it needs a person's approval, which this task cannot ask for", Refused: true}}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app"})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(approvals) != 1 || approvals[0] || res.Operations[0].State != capstan.OutcomeFailed || res.Operations[0].PolicyRule != "r" {
		t.Errorf("ExecuteTool told approvals %v, operation %+v; want one call told false, refused by r", approvals, res.Operations[0])
	}
}

// An approve binds to the call the person was shown: without its hash, or
// with another, it is refused before anything is recorded; a name the
// task's approvers (CAPSTAN_APPROVERS) do not list is refused too, approve
// or deny. The approval taken records the hash and the client's identity,
// and the ExecuteTool that sends carries the hash.
func TestApprovalBindsTheCallAndItsApprovers(t *testing.T) {
	t.Parallel()
	env, given := approvalTask(t, 1)
	bad := []struct {
		update string
		req    workflows.ApprovalRequest
		want   string
	}{
		{workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID, By: "alice"}, "approve needs the sha256 of the call it approves (--hash " + prHash + ")"},
		{workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID, By: "alice", Hash: "beef"}, "call has sha256 " + prHash + ", not beef: nothing was approved"},
		{workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID, By: "mallory", Hash: prHash}, "mallory is not one of task T's approvers (alice, bob)"},
		{workflows.UpdateDeny, workflows.ApprovalRequest{OperationID: prOpID, By: "mallory", Reason: "no"}, "mallory is not one of task T's approvers"},
	}
	errs := make([]error, len(bad))
	for i, b := range bad {
		answerAt(env, time.Hour+time.Duration(i)*time.Minute, b.update, b.req, &errs[i])
	}
	var okErr error
	answerAt(env, 2*time.Hour, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID, By: "alice", Hash: strings.ToUpper(prHash), Client: "7@laptop@"}, &okErr)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app",
		Approvers: []string{"alice", "bob"}})
	for i, b := range bad {
		if errs[i] == nil || !strings.Contains(errs[i].Error(), b.want) {
			t.Errorf("%s %+v: %v, want refused with %q", b.update, b.req, errs[i], b.want)
		}
	}
	if okErr != nil {
		t.Fatalf("alice's approval with the hash: %v", okErr)
	}
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if op := res.Operations[0]; op.State != capstan.OutcomeSucceeded || op.Approval == nil || op.Approval.Hash != prHash || op.Approval.Client != "7@laptop@" {
		t.Errorf("operation = %+v, approval %+v; want sent, approved with the hash and alice's client", op, op.Approval)
	}
	if in := given(); len(in) != 2 || in[1].Approval == nil || in[1].Approval.Hash != prHash {
		t.Errorf("ExecuteTool inputs = %+v, want the second carrying the approved hash", in)
	}
}

// What was sent stays sent: an operation ExecuteTool answered awaiting
// approval whose ledger row, asked before a person is, says it succeeded
// (a reset to the moment it was asked, after it was approved and sent) is
// answered from the ledger: nobody is asked, nothing is denied.
func TestApprovalAsksTheLedgerFirst(t *testing.T) {
	t.Parallel()
	env, given, ledger := approvalTaskWithLedger(t, 1)
	ledger.State = capstan.OutcomeSucceeded
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app",
		ApprovalTimeout: time.Hour})
	var res workflows.TaskResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if op := res.Operations[0]; res.Status != workflows.StatusCompleted || op.State != capstan.OutcomeSucceeded || !op.Replayed || op.Approval != nil {
		t.Errorf("status %s, operation %+v; want completed, the pull request succeeded, replayed, with no approval asked", res.Status, op)
	}
	if in := given(); len(in) != 1 || ledger.asked != 1 {
		t.Errorf("ExecuteTool ran %d times and asked the ledger %d times; want the ask once and the ledger once", len(in), ledger.asked)
	}
}

// A task cancelled while an operation waits for approval asks the ledger
// what became of it: one the ledger holds succeeded (sent before a reset
// brought the task back to the question) is recorded succeeded, never
// "not sent".
func TestCancelWhileAwaitingKeepsWhatWasSent(t *testing.T) {
	t.Parallel()
	env, _, ledger := approvalTaskWithLedger(t, 1)
	env.RegisterDelayedCallback(func() {
		ledger.mu.Lock()
		ledger.State = capstan.OutcomeSucceeded
		ledger.mu.Unlock()
		env.CancelWorkflow()
	}, time.Hour)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app"})
	res := statusOf(t, env)
	if op := res.Operations[0]; res.Status != workflows.StatusCancelled || op.State != capstan.OutcomeSucceeded || strings.Contains(op.Reason, "not sent") {
		t.Errorf("status %s, operation %+v; want cancelled, the operation succeeded as the ledger holds it", res.Status, op)
	}
}
