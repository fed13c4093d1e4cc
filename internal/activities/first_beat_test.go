package activities_test

import (
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// A model attempt's first heartbeat comes 250 ms into the attempt, not
// as it starts (docs/design.md §4.2). The heartbeat timeout here is ten
// minutes, so the ticker's first beat (a third of it) comes long after
// either test has ended: every beat they see is the first one.

// longTurnTimeout is a heartbeat timeout whose ticker never beats within a
// test.
const longTurnTimeout = 10 * time.Minute

// beatsOf records each ModelTurn heartbeat's report on the returned channel.
func beatsOf(t *testing.T, f *fixture) (chan contract.AttemptReport, func(contract.ModelTurnInput) (contract.ModelTurnResult, error)) {
	t.Helper()
	env := f.workflowEnv()
	env.RegisterWorkflow(modelTurnWorkflow)
	beats := make(chan contract.AttemptReport, 64)
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var r contract.AttemptReport
		if err := details.Get(&r); err != nil {
			t.Errorf("heartbeat details: %v", err)
			return
		}
		beats <- r
	})
	run := func(in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
		env.ExecuteWorkflow(modelTurnWorkflow, callOptions{HeartbeatTimeout: longTurnTimeout, StartToCloseTimeout: time.Minute}, in)
		var out contract.ModelTurnResult
		err := env.GetWorkflowResult(&out)
		return out, err
	}
	return beats, run
}

func firstBeatInput() contract.ModelTurnInput {
	return contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:hello",
		Seed:   []model.Message{{Role: model.RoleUser, Content: "hi"}},
		Limits: model.Limits{Idle: time.Minute, HeartbeatTimeout: longTurnTimeout}}
}

// A turn that ends before its first beat is due sends the server no
// heartbeat at all.
func TestShortModelTurnSendsNoHeartbeat(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	beats, run := beatsOf(t, f)
	out, err := run(firstBeatInput())
	if err != nil || out.Text == "" {
		t.Fatalf("ModelTurn = %+v, %v; want the sandbox's answer", out, err)
	}
	select {
	case b := <-beats:
		t.Errorf("a short turn sent a heartbeat: %+v", b)
	default:
	}
}

// A turn that runs on beats long before its ticker's first beat, with what
// a retry after a lost worker reads from the timeout's last heartbeat
// details (workflows' attemptOutcomeOf; TestAbandonedAttemptsCountTowardTheBudget):
// the attempt, how far it got and the estimate of what it spent. So a worker
// killed 250 ms or more into a turn leaves that beat behind.
func TestLongModelTurnBeatsItsEstimateBeforeItsTicker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	beats, run := beatsOf(t, f)
	release := make(chan struct{})
	f.sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"}}]}\n\n"))
		http.NewResponseController(w).Flush()
		select { // the rest once the test saw the first beat
		case <-release:
		case <-r.Context().Done():
			return true
		}
		_, _ = w.Write([]byte("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
		return true
	})
	type result struct {
		out contract.ModelTurnResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := run(firstBeatInput())
		done <- result{out, err}
	}()
	var b contract.AttemptReport
	select {
	case b = <-beats:
	case r := <-done:
		t.Fatalf("the turn ended (%+v, %v) before its first beat", r.out, r.err)
	case <-time.After(time.Minute):
		t.Fatal("a turn held open sent no heartbeat within a minute")
	}
	close(release)
	if b.AttemptID != "T/t1/a1" || b.Phase == "" || b.Phase == model.PhaseUnknown || b.Outcome != "" ||
		b.Usage.InputTokens <= 0 || !b.UsageEstimated {
		t.Errorf("first beat = %+v, want the attempt, its phase and its estimate", b)
	}
	r := <-done
	if r.err != nil || r.out.Text != "thinking" {
		t.Fatalf("ModelTurn = %+v, %v; want the text", r.out, r.err)
	}
	if n := len(beats); n != 0 {
		t.Errorf("%d more beats, want none before the ticker's", n)
	}
}
