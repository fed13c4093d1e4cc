package workflows_test

import (
	"context"
	"fmt"
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

// This file drives AgentTask through every row of the turn guard
// (docs/design.md §4.4), the continuation of a cut answer, compaction,
// fallback models and persistent mode, against a scripted ModelTurn. The
// test environment's clock is virtual: the waits are real durable timers,
// skipped, and each call records the virtual time it was made at.

// reply is one scripted ModelTurn: given the call's input, its result.
type reply func(in contract.ModelTurnInput) (contract.ModelTurnResult, error)

// modelCall is one ModelTurn the workflow made.
type modelCall struct {
	in contract.ModelTurnInput
	at time.Time
}

// script answers ModelTurn calls in order; a call past its end fails the
// test and is rejected. A reply with repeat > 1 answers that many calls.
type script struct {
	t       *testing.T
	env     *testsuite.TestWorkflowEnvironment
	replies []reply
	calls   []modelCall
	// truncations are the TruncateTranscript calls.
	truncations []contract.TruncateInput
	// truncateDown is how many TruncateTranscript calls find the ledger
	// down before one succeeds.
	truncateDown int
	// endless, when set, answers every call past the script's end.
	endless reply
}

func (s *script) modelTurn(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
	s.calls = append(s.calls, modelCall{in: in, at: s.env.Now()})
	if len(s.replies) == 0 && s.endless != nil {
		return s.endless(in)
	}
	if len(s.replies) == 0 {
		s.t.Errorf("ModelTurn %s called after the script ended", in.AttemptID)
		return contract.ModelTurnResult{}, report(model.OutcomeRejected, 0, "the script ended")(in)
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r(in)
}

// times repeats r n times.
func times(n int, r reply) []reply {
	out := make([]reply, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// answer completes the call with text, finishing with reason.
func answer(text, reason string) reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:after-" + in.AttemptID, Text: text,
			FinishReason: reason, Phase: model.PhaseStreamCompleted}, nil
	}
}

// callsTool completes the call with one read.
func callsTool() reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:after-" + in.AttemptID,
			ToolCalls: []contract.ToolCallRef{readCall}, FinishReason: "tool_calls", Phase: model.PhaseStreamCompleted}, nil
	}
}

// report ends the call as the activity reports a failed attempt.
func report(outcome model.Outcome, retryAfter time.Duration, msg string) func(contract.ModelTurnInput) error {
	return func(in contract.ModelTurnInput) error {
		return temporal.NewNonRetryableApplicationError(msg, contract.ErrTypeModelAttempt, nil, contract.AttemptReport{
			AttemptID: in.AttemptID, Outcome: outcome, Phase: model.PhaseHeadersReceived, RetryAfterMS: retryAfter.Milliseconds(), Message: msg})
	}
}

// fails ends the call with outcome.
func fails(outcome model.Outcome, retryAfter time.Duration) reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		return contract.ModelTurnResult{}, report(outcome, retryAfter, string(outcome)+" from the provider")(in)
	}
}

// breakerOpenReply: the provider's breaker is open, 24 s left.
func breakerOpenReply(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
	return contract.ModelTurnResult{}, temporal.NewNonRetryableApplicationError("breaker open", contract.ErrTypeModelAttempt, nil,
		contract.AttemptReport{AttemptID: in.AttemptID, Outcome: model.OutcomeBreakerOpen, Phase: model.PhaseNotSent,
			RetryAfterMS: 24000, Breaker: "model/openai", Message: "breaker model/openai is open"})
}

// workerLost: the attempt's worker stopped heartbeating.
func workerLost(contract.ModelTurnInput) (contract.ModelTurnResult, error) {
	return contract.ModelTurnResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
}

// compacted is a summary call that replaced n items.
func compacted(n int) reply {
	return func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		if !in.Compact {
			return contract.ModelTurnResult{}, fmt.Errorf("call %s is not a compaction", in.AttemptID)
		}
		return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:compacted-" + in.AttemptID,
			Text: "summary", Phase: model.PhaseStreamCompleted, Compacted: n}, nil
	}
}

// run is one task run against a script.
type run struct {
	res     workflows.TaskResult
	journal []string
	calls   []modelCall
	s       *script
}

func (r run) joined() string { return strings.Join(r.journal, "\n") }

// runTask runs AgentTask with in against replies; before, when set, adjusts
// the environment (an older workflow version) or the script.
func runTask(t *testing.T, in workflows.AgentTaskInput, replies []reply, before func(*testsuite.TestWorkflowEnvironment, *script)) run {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	s := &script{t: t, env: env, replies: replies}
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(s.modelTurn)
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(contract.ExecuteToolResult{State: capstan.OutcomeSucceeded, Item: "sha256:20"}, nil)
	env.OnActivity(a.TruncateTranscript, mock.Anything, mock.Anything).Return(
		func(_ context.Context, tin contract.TruncateInput) (contract.TruncateResult, error) {
			if s.truncateDown > 0 {
				s.truncateDown--
				return contract.TruncateResult{}, ledgerDown()
			}
			s.truncations = append(s.truncations, tin)
			return contract.TruncateResult{Transcript: "sha256:truncated", Removed: 4}, nil
		})
	if before != nil {
		before(env, s)
	}
	if in.TaskID == "" {
		in.TaskID, in.Tenant, in.Prompt = "T", "default", "p"
	}
	if in.Model == "" {
		in.Model = "openai:m"
	}
	env.ExecuteWorkflow(workflows.AgentTask, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var r run
	if err := env.GetWorkflowError(); err == nil {
		if err := env.GetWorkflowResult(&r.res); err != nil {
			t.Fatal(err)
		}
	} else {
		r.res = taskResult(t, err)
	}
	v, err := env.QueryWorkflow(workflows.QueryJournal)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&r.journal); err != nil {
		t.Fatal(err)
	}
	if len(s.replies) > 0 {
		t.Errorf("%d scripted replies were never asked for", len(s.replies))
	}
	r.calls, r.s = s.calls, s
	return r
}

// gaps are the times between consecutive calls.
func (r run) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(r.calls); i++ {
		out = append(out, r.calls[i].at.Sub(r.calls[i-1].at))
	}
	return out
}

func (r run) wantOutcome(t *testing.T, status workflows.Status, code workflows.FailureCode, calls int, journal ...string) {
	t.Helper()
	if r.res.Status != status || r.res.FailureCode != code {
		t.Errorf("status, code = %s, %q (%s); want %s, %q", r.res.Status, r.res.FailureCode, r.res.Message, status, code)
	}
	if code != "" && r.res.Message == "" {
		t.Error("a failed task carries no readable sentence")
	}
	if len(r.calls) != calls {
		t.Errorf("%d ModelTurn calls, want %d", len(r.calls), calls)
	}
	for _, j := range journal {
		if !strings.Contains(r.joined(), j) {
			t.Errorf("journal has no line with %q:\n%s", j, r.joined())
		}
	}
}

// TestTurnGuardRows runs one task per row of the turn guard table
// (docs/design.md §4.4) and checks the outcome, the number of model calls,
// the delays between them and the journal line that says why.
func TestTurnGuardRows(t *testing.T) {
	t.Parallel()
	done := answer("done", "stop")
	t.Run("completed clears the idle count", func(t *testing.T) {
		// Idle cut, a cut answer that completes, then another idle cut in
		// the continuation: retried, because the completed attempt cleared
		// the count.
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeCutIdle, 0), answer("half ", "length"),
			fails(model.OutcomeCutIdle, 0), answer("whole", "stop")}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 4, "T/~3c4e2731fc30/t1/c1/a1 abandoned (cut_idle); retrying in 1s")
		if r.res.FinalText != "half whole" {
			t.Errorf("final text = %q", r.res.FinalText)
		}
	})
	t.Run("not_sent is retried with full jitter under the transport budget", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, append(times(4, fails(model.OutcomeNotSent, 0)), done), nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 5, "T/~3c4e2731fc30/t1/a4 abandoned (not_sent); retrying in")
		for i, g := range r.gaps() {
			if cap := min(500*time.Millisecond<<i, 10*time.Second); g > cap {
				t.Errorf("delay %d = %s, over the %s cap", i+1, g, cap)
			}
		}
	})
	t.Run("not_sent past the transport budget fails", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, times(5, fails(model.OutcomeNotSent, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderUnavailable, 5, "T/~3c4e2731fc30/t1/a5 abandoned (not_sent); giving up")
	})
	t.Run("overloaded with Retry-After waits exactly that long", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeOverloaded, 7*time.Second), done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2, "T/~3c4e2731fc30/t1/a1 abandoned (overloaded); retrying in 7s")
		if g := r.gaps()[0]; g != 7*time.Second {
			t.Errorf("the second attempt came %s after the first, want 7s", g)
		}
	})
	t.Run("overloaded without Retry-After backs off with jitter under 2 s, 4 s, …", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, append(times(3, fails(model.OutcomeOverloaded, 0)), done), nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 4, "(overload 3/5)")
		for i, g := range r.gaps() {
			if cap := 2 * time.Second << i; g > cap {
				t.Errorf("delay %d = %s, over %s", i+1, g, cap)
			}
		}
	})
	t.Run("overloaded past its budget fails", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, times(6, fails(model.OutcomeOverloaded, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderUnavailable, 6, "T/~3c4e2731fc30/t1/a6 abandoned (overloaded); giving up: the model provider stayed overloaded through 6 attempts")
	})
	t.Run("overloaded asking for more than 5 min fails and says how long", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeOverloaded, 10*time.Minute)}, nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderUnavailable, 1, "asked to wait 10m0s, longer than the 5m0s capstan waits")
	})
	t.Run("rejected fails at once", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeRejected, 0)}, nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderRejected, 1, "T/~3c4e2731fc30/t1/a1 abandoned (rejected); giving up")
	})
	t.Run("cut_idle is retried once after 1 s", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeCutIdle, 0), done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2, "T/~3c4e2731fc30/t1/a1 abandoned (cut_idle); retrying in 1s")
		if g := r.gaps()[0]; g != time.Second {
			t.Errorf("delay = %s, want 1s", g)
		}
	})
	t.Run("cut_idle twice fails", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, times(2, fails(model.OutcomeCutIdle, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailModelIdleTimeout, 2, "T/~3c4e2731fc30/t1/a2 abandoned (cut_idle); giving up")
	})
	t.Run("cut_total fails without a fallback", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeCutTotal, 0)}, nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailModelMaxDuration, 1, "T/~3c4e2731fc30/t1/a1 abandoned (cut_total); giving up")
	})
	t.Run("cut_total switches to the fallback", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{Fallbacks: []string{"anthropic:f"}}, []reply{fails(model.OutcomeCutTotal, 0), done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2,
			"T/~3c4e2731fc30/t1/a1 abandoned (cut_total): cut_total from the provider; switching turn 1 from openai:m to fallback model anthropic:f")
		if r.calls[1].in.Model != "anthropic:f" || r.res.Turns[0].Attempts[1].Model != "anthropic:f" {
			t.Errorf("second attempt on %s (recorded %s), want anthropic:f", r.calls[1].in.Model, r.res.Turns[0].Attempts[1].Model)
		}
	})
	t.Run("invalid is retried twice after 0.5 s", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, append(times(2, fails(model.OutcomeInvalid, 0)), done), nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 3, "(invalid 2/2)")
		for _, g := range r.gaps() {
			if g != 500*time.Millisecond {
				t.Errorf("delay = %s, want 500ms", g)
			}
		}
	})
	t.Run("invalid a third time fails", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, times(3, fails(model.OutcomeInvalid, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailModelInvalidOutput, 3, "T/~3c4e2731fc30/t1/a3 abandoned (invalid); giving up")
	})
	t.Run("overflow compacts the transcript and retries at once", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{callsTool(), fails(model.OutcomeOverflow, 0), compacted(5), done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 4,
			"T/~3c4e2731fc30/t2/a1 abandoned (overflow): overflow from the provider; compacting the transcript (round 1/3)",
			"T/~3c4e2731fc30/t2/k1/a1 completed: 5 earlier transcript items summarized")
		k, retry := r.calls[2].in, r.calls[3].in
		if !k.Compact || k.TurnID != "T/~3c4e2731fc30/t2/k1" || k.Transcript != "sha256:after-T/~3c4e2731fc30/t1/a1" || len(k.Append) != 1 {
			t.Errorf("compaction input = %+v, want T/~3c4e2731fc30/t2/k1 over the overflowing transcript and its appended tool result", k)
		}
		if retry.AttemptID != "T/~3c4e2731fc30/t2/a2" || retry.Transcript != "sha256:compacted-T/~3c4e2731fc30/t2/k1/a1" || retry.Append != nil || retry.Seed != nil {
			t.Errorf("retry input = %+v, want T/~3c4e2731fc30/t2/a2 on the compacted transcript alone", retry)
		}
		if g := r.gaps()[2]; g != 0 {
			t.Errorf("retry after compaction came %s later, want at once", g)
		}
	})
	t.Run("overflow a fourth time fails context_overflow after 3 rounds", func(t *testing.T) {
		var replies []reply
		for range 3 {
			replies = append(replies, fails(model.OutcomeOverflow, 0), compacted(2))
		}
		r := runTask(t, workflows.AgentTaskInput{}, append(replies, fails(model.OutcomeOverflow, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailContextOverflow, 7,
			"compacting the transcript (round 3/3)", "T/~3c4e2731fc30/t1/a4 abandoned (overflow); giving up: the transcript still does not fit the model's context after 3 compactions")
	})
	t.Run("overflow with a failed summary truncates behind a marker", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeOverflow, 0), fails(model.OutcomeCutIdle, 0), done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 3,
			"T/~3c4e2731fc30/t1/k1/a1 abandoned (cut_idle): cut_idle from the provider; truncating the transcript instead, behind a visible marker",
			"turn 1: 4 earlier transcript items removed, replaced by a marker saying so")
		if len(r.s.truncations) != 1 || r.s.truncations[0].Seed == nil {
			t.Errorf("truncations = %+v, want one, of the first turn's seeded transcript", r.s.truncations)
		}
		if in := r.calls[2].in; in.Transcript != "sha256:truncated" || in.Seed != nil {
			t.Errorf("retry input = %+v, want the truncated transcript", in)
		}
	})
	t.Run("overflow with nothing left to compact fails", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{fails(model.OutcomeOverflow, 0), compacted(0)}, nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailContextOverflow, 2, "T/~3c4e2731fc30/t1/k1/a1: nothing left to compact; giving up")
	})
	t.Run("worker_lost is retried at once", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{workerLost, done}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2, "T/~3c4e2731fc30/t1/a1 abandoned (worker_lost); retrying in 0s")
		if g := r.gaps()[0]; g != 0 {
			t.Errorf("delay = %s, want 0", g)
		}
	})
	t.Run("breaker_open is waited out without spending budget", func(t *testing.T) {
		replies := append(times(7, breakerOpenReply), times(5, fails(model.OutcomeOverloaded, 0))...)
		r := runTask(t, workflows.AgentTaskInput{}, append(replies, done), nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 13, "for breaker model/openai: model attempt T/~3c4e2731fc30/t1/a7 was not sent", "(overload 5/5)")
		for i, g := range r.gaps()[:7] {
			if g < 24*time.Second || g > 24*time.Second+4800*time.Millisecond {
				t.Errorf("breaker wait %d = %s, want 24 s plus at most a fifth in jitter", i+1, g)
			}
		}
	})
}

// TestCutAnswer: a final answer cut by the output token limit is continued,
// and never delivered incomplete.
func TestCutAnswer(t *testing.T) {
	t.Parallel()
	t.Run("continued twice, then whole", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{answer("one ", "length"), answer("two ", "length"), answer("three", "stop")}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 3,
			"turn 1: T/~3c4e2731fc30/t1/a1's answer was cut by the output token limit after 4 characters; asking the model to continue it (continuation 1/2)",
			"turn 1: the answer is complete after 2 continuation(s) (13 characters)")
		if r.res.FinalText != "one two three" {
			t.Errorf("final text = %q, want the parts in order", r.res.FinalText)
		}
		for k, c := range r.calls[1:] {
			want := fmt.Sprintf("T/~3c4e2731fc30/t1/c%d", k+1)
			if c.in.TurnID != want || c.in.AttemptID != want+"/a1" || c.in.Transcript != "sha256:after-"+r.calls[k].in.AttemptID ||
				len(c.in.Seed) != 1 || c.in.Seed[0].Role != model.RoleUser || c.in.Append != nil {
				t.Errorf("continuation %d input = %+v, want %s over the cut answer, asking to continue", k+1, c.in, want)
			}
		}
	})
	t.Run("still cut after two continuations fails model_output_truncated", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{SlackChannel: "#eng"}, times(3, answer("part ", "length")), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailModelOutputTruncated, 3,
			"turn 1: the answer is still cut by the output token limit after 2 continuations (15 characters); failing rather than delivering it incomplete")
		if len(r.res.Deliveries) != 0 || r.res.FinalText != "" {
			t.Errorf("deliveries = %+v, final text %q: a cut answer reached a delivery", r.res.Deliveries, r.res.FinalText)
		}
	})
	t.Run("a continuation that calls a tool ends the turn with it", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{answer("thinking ", "length"), callsTool(), answer("done", "stop")}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 3)
		if len(r.res.Operations) != 1 || r.res.Operations[0].TurnID != "T/~3c4e2731fc30/t1" {
			t.Errorf("operations = %+v, want the read, declared by turn 1", r.res.Operations)
		}
	})
	t.Run("before model-turns-complete a cut answer was delivered as it was", func(t *testing.T) {
		r := runTask(t, workflows.AgentTaskInput{}, []reply{answer("half", "length")}, func(env *testsuite.TestWorkflowEnvironment, _ *script) {
			env.OnGetVersion("all-changes-v7", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			env.OnGetVersion("model-turns-complete", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
		})
		r.wantOutcome(t, workflows.StatusCompleted, "", 1)
		if r.res.FinalText != "half" {
			t.Errorf("final text = %q", r.res.FinalText)
		}
	})
}

// TestFallbackModels: a spent overload budget or a total cut switches the
// turn, once, to the next fallback model; the task keeps it.
func TestFallbackModels(t *testing.T) {
	t.Parallel()
	in := workflows.AgentTaskInput{Fallbacks: []string{"anthropic:f1", "openai:f2"}}
	t.Run("overload budget spent: the fallback answers and keeps the next turn", func(t *testing.T) {
		replies := append(times(6, fails(model.OutcomeOverloaded, 0)), callsTool(), answer("done", "stop"))
		r := runTask(t, in, replies, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 8,
			"T/~3c4e2731fc30/t1/a6 abandoned (overloaded): the model provider stayed overloaded through 6 attempts: overloaded from the provider; switching turn 1 from openai:m to fallback model anthropic:f1, which the task keeps")
		if got := r.calls[6].in; got.Model != "anthropic:f1" || got.AttemptID != "T/~3c4e2731fc30/t1/a7" {
			t.Errorf("attempt after the switch = %s on %s, want T/~3c4e2731fc30/t1/a7 on anthropic:f1", got.AttemptID, got.Model)
		}
		if got := r.calls[7].in.Model; got != "anthropic:f1" {
			t.Errorf("turn 2 on %s, want the fallback the task switched to", got)
		}
	})
	t.Run("once per turn: the fallback overloaded too fails the turn", func(t *testing.T) {
		r := runTask(t, in, times(12, fails(model.OutcomeOverloaded, 0)), nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderUnavailable, 12, "T/~3c4e2731fc30/t1/a12 abandoned (overloaded); giving up")
		if strings.Contains(r.joined(), "openai:f2") {
			t.Errorf("the turn switched twice:\n%s", r.joined())
		}
	})
	t.Run("a later turn switches to the next model of the list", func(t *testing.T) {
		replies := append([]reply{fails(model.OutcomeCutTotal, 0), callsTool(), fails(model.OutcomeCutTotal, 0)}, answer("done", "stop"))
		r := runTask(t, in, replies, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 4, "switching turn 2 from anthropic:f1 to fallback model openai:f2")
		if got := r.calls[3].in.Model; got != "openai:f2" {
			t.Errorf("last attempt on %s, want openai:f2", got)
		}
	})
	t.Run("not for outcomes another model shares", func(t *testing.T) {
		r := runTask(t, in, []reply{fails(model.OutcomeRejected, 0)}, nil)
		r.wantOutcome(t, workflows.StatusFailed, workflows.FailProviderRejected, 1)
	})
}

// TestPersistentMode: overloads are retried for up to 6 h, each wait capped
// at 5 min, with a journal line at least every 30 s.
func TestPersistentMode(t *testing.T) {
	t.Parallel()
	in := workflows.AgentTaskInput{Persistent: true}
	t.Run("gives up after 6 h, never waiting more than 5 min, journalling every 30 s", func(t *testing.T) {
		// Overloaded for ever; the task stops asking at 6 h.
		r := runTask(t, in, nil, func(_ *testsuite.TestWorkflowEnvironment, s *script) { s.endless = fails(model.OutcomeOverloaded, 0) })
		if r.res.Status != workflows.StatusFailed || r.res.FailureCode != workflows.FailProviderUnavailable {
			t.Fatalf("status, code = %s, %s (%s)", r.res.Status, r.res.FailureCode, r.res.Message)
		}
		if !strings.Contains(r.joined(), "stayed overloaded for 6h0m0s") {
			t.Errorf("journal does not say it waited 6 h:\n%s", r.joined())
		}
		for i, g := range r.gaps() {
			if g > 5*time.Minute {
				t.Errorf("wait %d = %s, over 5 min", i+1, g)
			}
		}
		if span := r.calls[len(r.calls)-1].at.Sub(r.calls[0].at); span != 6*time.Hour {
			t.Errorf("overload retries spanned %s, want 6h", span)
		}
		wantJournalEvery(t, r.journal, 30*time.Second)
		if n := len(r.calls); n <= 6 {
			t.Errorf("%d attempts in 6 h, want more than the normal budget's 6", n)
		}
	})
	t.Run("a Retry-After over 5 min is capped, not fatal", func(t *testing.T) {
		r := runTask(t, in, []reply{fails(model.OutcomeOverloaded, 20*time.Minute), answer("done", "stop")}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2, "the provider asked for 20m0s, capped at 5m0s", "still waiting 4m30s for turn 1's next attempt (overloaded)")
		if g := r.gaps()[0]; g != 5*time.Minute {
			t.Errorf("wait = %s, want 5m", g)
		}
		wantJournalEvery(t, r.journal, 30*time.Second)
		if r.res.Waiting != "" {
			t.Errorf("waiting = %q after the wait", r.res.Waiting)
		}
	})
	t.Run("a breaker wait is journalled every 30 s too", func(t *testing.T) {
		longOpen := func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			return contract.ModelTurnResult{}, temporal.NewNonRetryableApplicationError("breaker open", contract.ErrTypeModelAttempt, nil,
				contract.AttemptReport{AttemptID: in.AttemptID, Outcome: model.OutcomeBreakerOpen, Phase: model.PhaseNotSent,
					RetryAfterMS: 34000, Breaker: "model/openai", Message: "breaker model/openai is open"})
		}
		r := runTask(t, in, []reply{longOpen, answer("done", "stop")}, nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 2, "s for breaker model/openai (until")
		wantJournalEvery(t, r.journal, 30*time.Second)
	})
	t.Run("past the normal budget, then answered", func(t *testing.T) {
		r := runTask(t, in, append(times(20, fails(model.OutcomeOverloaded, 0)), answer("done", "stop")), nil)
		r.wantOutcome(t, workflows.StatusCompleted, "", 21, "(overload 20, persistent mode:")
	})
}

// wantJournalEvery checks that no two consecutive journal lines are more than
// every apart.
func wantJournalEvery(t *testing.T, journal []string, every time.Duration) {
	t.Helper()
	var prev time.Time
	for _, line := range journal {
		ts, _, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			t.Fatalf("journal line %q has no time: %v", line, err)
		}
		if !prev.IsZero() && at.Sub(prev) > every {
			t.Errorf("%s without a journal line before %q", at.Sub(prev), line)
		}
		prev = at
	}
}
