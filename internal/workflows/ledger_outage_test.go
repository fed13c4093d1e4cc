package workflows_test

import (
	"context"
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
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// ledgerDown is ExecuteTool's error while the worker's ledger cannot be
// reached, its outage limit 5 minutes.
func ledgerDown() error {
	w := contract.BreakerWait{Breaker: "ledger", State: "open", Wait: 30 * time.Second, OutageLimit: 5 * time.Minute}
	return temporal.NewApplicationErrorWithOptions("the ledger could not be reached, so nothing was sent", contract.ErrTypeBreakerOpen,
		temporal.ApplicationErrorOptions{NextRetryDelay: w.Wait, Details: []any{w}})
}

// A task waits for its ledger, journalled, for up to the worker's outage
// limit in one outage, and then fails ledger_unavailable with the
// operation not sent; a shorter outage is waited out and the task goes on.
func TestLedgerOutageIsWaitedOutUpToItsLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		waits int // ExecuteTool's calls that find the ledger down
		want  workflows.Status
	}{
		{"short outage", 3, workflows.StatusCompleted},
		{"past the limit", 1000, workflows.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var suite testsuite.WorkflowTestSuite
			suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Activities{})
			callsThenAnswers(prCall)(env)
			calls := 0
			env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
				func(context.Context, contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
					if calls++; calls <= tc.waits {
						return contract.ExecuteToolResult{}, ledgerDown()
					}
					return contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, ExternalID: "https://github.com/acme/app/pull/9", Item: "sha256:20"}, nil
				})
			env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
			var res workflows.TaskResult
			if err := env.GetWorkflowResult(&res); err != nil && tc.want == workflows.StatusCompleted {
				t.Fatal(err)
			}
			v, err := env.QueryWorkflow(workflows.QueryStatus)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Get(&res); err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.want {
				t.Fatalf("status %s (%s: %s), want %s", res.Status, res.FailureCode, res.Message, tc.want)
			}
			v, err = env.QueryWorkflow(workflows.QueryJournal)
			if err != nil {
				t.Fatal(err)
			}
			var journal []string
			if err := v.Get(&journal); err != nil {
				t.Fatal(err)
			}
			waits := 0
			for _, line := range journal {
				if strings.Contains(line, "for breaker ledger: operation") {
					waits++
				}
			}
			if tc.want == workflows.StatusCompleted {
				if waits != tc.waits {
					t.Errorf("journalled waits for breaker ledger = %d, want %d", waits, tc.waits)
				}
				return
			}
			// 30 s waits within 5 minutes: ten, then the eleventh would pass it.
			if res.FailureCode != workflows.FailLedgerUnavailable || waits != 10 || calls != 11 {
				t.Errorf("failure %s after %d waits and %d calls, want ledger_unavailable after 10 waits and 11 calls; message %q", res.FailureCode, waits, calls, res.Message)
			}
			if op := res.Operations[0]; op.State != capstan.OutcomeAbsent {
				t.Errorf("operation = %+v, want absent: nothing was sent", op)
			}
		})
	}
}

// A truncation that finds the ledger down for longer than Temporal's five
// attempts is waited out by the workflow, journalled, and the task goes on.
func TestTruncationWaitsOutALedgerOutage(t *testing.T) {
	t.Parallel()
	r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeOverflow, 0), fails(model.OutcomeCutIdle, 0), answer("done", "stop")},
		func(_ *testsuite.TestWorkflowEnvironment, s *script) { s.truncateDown = 8 })
	r.wantOutcome(t, workflows.StatusCompleted, "", 3,
		"for breaker ledger: truncation of turn 1 was not sent",
		"turn 1: 4 earlier transcript items removed, replaced by a marker saying so")
	if len(r.s.truncations) != 1 {
		t.Errorf("truncations = %d, want 1 after the outage", len(r.s.truncations))
	}
}
