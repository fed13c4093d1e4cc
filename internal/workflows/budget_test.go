package workflows_test

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The budgets (docs/design.md §11.4) against a scripted ModelTurn: what
// every attempt spent adds up, abandoned attempts included, and no model
// request is sent once the task has spent its budget.

// spends completes the call with one read, reporting in and out tokens.
func spends(in, out int64) reply {
	return func(call contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		r, err := callsTool()(call)
		r.Usage = model.Usage{InputTokens: in, OutputTokens: out}
		return r, err
	}
}

// abandonedSpending ends the call as an overloaded attempt whose report
// carries the estimate of what it spent.
func abandonedSpending(tokens int64) reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		return contract.ModelTurnResult{}, temporal.NewNonRetryableApplicationError("overloaded", contract.ErrTypeModelAttempt, nil, contract.AttemptReport{
			AttemptID: in.AttemptID, Outcome: model.OutcomeOverloaded, Phase: model.PhaseHeadersReceived, Message: "overloaded",
			Usage: model.Usage{InputTokens: tokens}, UsageEstimated: true})
	}
}

// lostSpending: the attempt's worker stopped heartbeating; its last beat
// carried the estimate.
func lostSpending(tokens int64) reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		return contract.ModelTurnResult{}, temporal.NewHeartbeatTimeoutError(contract.AttemptReport{AttemptID: in.AttemptID,
			Phase: model.PhaseStreamPartial, Usage: model.Usage{InputTokens: tokens}, UsageEstimated: true})
	}
}

// With 120 tokens a call and a 300-token budget: three requests, then
// budget_exhausted, listing what the task did.
func TestBudgetAllowsThreeRequestsOf120TokensIn300(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{Budget: contract.Budget{MaxTokens: 300}},
		[]reply{spends(100, 20), spends(100, 20), spends(100, 20)}, nil)
	r.wantOutcome(t, workflows.StatusFailed, workflows.FailBudgetExhausted, 3)
	s := r.res.Spend
	if s == nil || s.Tokens != 360 || s.Requests != 3 || s.EstimatedTokens != 0 || s.MaxTokens != 300 {
		t.Fatalf("spend = %+v, want 360 tokens over 3 requests against 300", s)
	}
	for _, want := range []string{"360 tokens of its 300-token budget", "3 model request(s) over 3 turn(s)", "3 tool operation(s): github_get_file succeeded"} {
		if !strings.Contains(r.res.Message, want) {
			t.Errorf("message %q does not say %q", r.res.Message, want)
		}
	}
	if !strings.Contains(r.joined(), "budget: 300 tokens, no cost budget") {
		t.Errorf("journal does not state the budget:\n%s", r.joined())
	}
}

// Abandoned attempts spend too: an overloaded one's estimate and a lost
// worker's (from its last heartbeat) count, an attempt a breaker kept from
// being sent counts nothing.
func TestAbandonedAttemptsCountTowardTheBudget(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{Budget: contract.Budget{MaxTokens: 300}},
		[]reply{abandonedSpending(100), lostSpending(100), breakerOpenReply, spends(100, 50)}, nil)
	r.wantOutcome(t, workflows.StatusFailed, workflows.FailBudgetExhausted, 4)
	s := r.res.Spend
	if s == nil || s.Tokens != 350 || s.EstimatedTokens != 200 || s.Requests != 3 {
		t.Fatalf("spend = %+v, want 350 tokens (200 estimated) over 3 requests", s)
	}
}

// A cost budget prices each attempt by the task's model: two requests of
// $0.001 each reach $0.002, and the third is not sent.
func TestCostBudgetStopsTheTask(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{Model: "openai:gpt-4.1", Budget: contract.Budget{MaxCostUSD: 0.002}},
		[]reply{spends(100, 100), spends(100, 100)}, nil) // 100 × $2/M + 100 × $8/M = $0.001
	r.wantOutcome(t, workflows.StatusFailed, workflows.FailBudgetExhausted, 2)
	if s := r.res.Spend; s == nil || s.CostUSD < 0.0019999 || s.CostUSD > 0.0020001 || s.MaxTokens == 0 {
		t.Fatalf("spend = %+v, want $0.002 and the default token budget", s)
	}
	if !strings.Contains(r.res.Message, "$0.0020 of its $0.002 budget") {
		t.Errorf("message = %q", r.res.Message)
	}
}

// A cost budget on a model without a price ends the task before anything
// is sent.
func TestCostBudgetOnAnUnpricedModelSendsNothing(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{Model: "openai:m", Budget: contract.Budget{MaxCostUSD: 1}}, nil, nil)
	r.wantOutcome(t, workflows.StatusFailed, workflows.FailInvalidLimits, 0)
	if !strings.Contains(r.res.Message, "no price for openai:m") {
		t.Errorf("message = %q", r.res.Message)
	}
}

// A task started before changeBudgets keeps no budget.
func TestTaskBeforeBudgetsIsNotStopped(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{Budget: contract.Budget{MaxTokens: 300}},
		[]reply{spends(100, 20), spends(100, 20), spends(100, 20), spends(100, 20), answer("done", "stop")},
		func(env *testsuite.TestWorkflowEnvironment, _ *script) {
			env.OnGetVersion("token-and-cost-budgets", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
		})
	r.wantOutcome(t, workflows.StatusCompleted, "", 5)
	if r.res.Spend != nil {
		t.Errorf("spend = %+v, want none", r.res.Spend)
	}
}

// A continued run carries on the spend of the runs before it (its
// checkpoint's result): 250 tokens spent before, one request of 120 more,
// and the next is not sent.
func TestContinuedRunKeepsItsSpend(t *testing.T) {
	t.Parallel()
	cp := &workflows.Checkpoint{NextTurn: 5, Transcript: "sha256:before", Result: workflows.TaskResult{TaskID: "T", WorkflowID: "task-T",
		Turns: []workflows.TurnRecord{}, Operations: []workflows.OperationRecord{}, Deliveries: []workflows.DeliveryRecord{},
		Spend: &workflows.Spend{Tokens: 250, Requests: 4, MaxTokens: 300}}}
	r := runTask(t, workflows.AgentTaskInput{Budget: contract.Budget{MaxTokens: 300}, Checkpoint: cp},
		[]reply{spends(100, 20)}, nil)
	r.wantOutcome(t, workflows.StatusFailed, workflows.FailBudgetExhausted, 1)
	if s := r.res.Spend; s == nil || s.Tokens != 370 || s.Requests != 5 {
		t.Fatalf("spend = %+v, want 370 tokens over 5 requests", s)
	}
}
