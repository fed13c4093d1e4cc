package activities_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// modelTurnWorkflow runs ModelTurn once.
func modelTurnWorkflow(ctx workflow.Context, o callOptions, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
	var a *activities.Activities
	var res contract.ModelTurnResult
	err := workflow.ExecuteActivity(o.of(ctx), a.ModelTurn, in).Get(ctx, &res)
	return res, err
}

// ModelTurn's heartbeat detail is an AttemptReport: Temporal records it
// and `starter follow` reads it, so its fields are a contract. From the
// first beat on it carries the attempt's estimate; the ticker's beats say
// how far the stream got.
func TestModelTurnHeartbeatsItsProgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	env := f.workflowEnv()
	env.RegisterWorkflow(modelTurnWorkflow)
	type beat struct {
		keys   []string
		report contract.AttemptReport
	}
	beats := make(chan beat, 1024)
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var raw json.RawMessage
		var b beat
		if err := details.Get(&raw); err != nil {
			t.Errorf("heartbeat details: %v", err)
			return
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Errorf("heartbeat details %s: %v", raw, err)
			return
		}
		for k := range fields {
			b.keys = append(b.keys, k)
		}
		slices.Sort(b.keys)
		if err := json.Unmarshal(raw, &b.report); err != nil {
			t.Errorf("heartbeat details %s: %v", raw, err)
		}
		beats <- b
	})
	release := make(chan struct{})
	f.sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"}}]}\n\n"))
		http.NewResponseController(w).Flush()
		select { // the rest once the test saw a beat of the first part
		case <-release:
		case <-r.Context().Done():
			return true
		}
		_, _ = w.Write([]byte("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
		return true
	})
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:hello",
		Seed:   []model.Message{{Role: model.RoleUser, Content: "hi"}},
		Limits: model.Limits{Idle: time.Minute, HeartbeatTimeout: 300 * time.Millisecond}}
	type result struct {
		out contract.ModelTurnResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		env.ExecuteWorkflow(modelTurnWorkflow, callOptions{HeartbeatTimeout: in.Limits.HeartbeatTimeout, StartToCloseTimeout: time.Minute}, in)
		r.err = env.GetWorkflowResult(&r.out)
		done <- r
	}()

	// empty ones are omitted; from the first beat on, the attempt counts
	// the estimate of what it spends (its input's characters / 4), which
	// a lost worker's last beat hands to the budget.
	wantKeys := []string{"attempt_id", "chars", "events", "outcome", "phase", "usage", "usage_estimated"}
	first := <-beats
	est := first.report.Usage
	if est.InputTokens <= 0 || est.OutputTokens != 0 || !first.report.UsageEstimated || first.report.AttemptID != "T/t1/a1" || first.report.Phase == "" {
		t.Errorf("first beat = %+v, want the attempt's phase and an estimate of input tokens", first.report)
	}
	if first.report.PreviewTail == "" && !reflect.DeepEqual(first.keys, wantKeys) {
		t.Errorf("first beat's fields %v, want %v", first.keys, wantKeys)
	}
	beats <- first // it may be the one that shows the first part
	want := contract.AttemptReport{AttemptID: "T/t1/a1", Phase: model.PhaseStreamPartial, Events: 1, Chars: 8, PreviewTail: "thinking",
		Usage: est, UsageEstimated: true}
	giveUp := time.After(30 * time.Second)
	for { // the ticker's beats, until one shows the first part
		var b beat
		select {
		case b = <-beats:
		case <-giveUp:
			t.Fatalf("no beat showed %+v", want)
		}
		if b.report == want {
			keys := append(slices.Clone(wantKeys), "preview_tail")
			slices.Sort(keys)
			if !reflect.DeepEqual(b.keys, keys) {
				t.Errorf("beat fields %v, want %v", b.keys, keys)
			}
			break
		}
		if b.report.AttemptID != "T/t1/a1" || b.report.Outcome != "" {
			t.Fatalf("beat = %+v, want the attempt's progress", b.report)
		}
	}
	close(release)
	r := <-done
	if r.err != nil || r.out.Text != "thinking" || r.out.Phase != model.PhaseStreamCompleted || r.out.Events != 2 {
		t.Fatalf("ModelTurn = %+v, %v; want the text, completed after 2 events", r.out, r.err)
	}
}

// An attempt that did not complete with the usage its provider reported
// counts its input's characters / 4 (rounded up) as input tokens: every
// message's content and tool call, and the tools offered.
func TestEstimateUsageIsTheInputsCharactersOverFour(t *testing.T) {
	t.Parallel()
	req := model.Request{Messages: []model.Message{
		{Role: model.RoleUser, Content: "héllo wörld"},                                                                 // 11 characters
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{Name: "get", Arguments: json.RawMessage(`{"a":1}`)}}}, // 3 + 7
	}}
	if got := activities.EstimateUsage(req); got != (model.Usage{InputTokens: 6}) { // ceil(21 / 4)
		t.Errorf("estimate = %+v, want 6 input tokens", got)
	}
	req.Tools = []model.ToolSpec{{Name: "x"}}
	spec, _ := json.Marshal(req.Tools[0])
	if got, want := activities.EstimateUsage(req).InputTokens, int64((21+len(spec)+3)/4); got != want {
		t.Errorf("estimate with a tool = %d, want %d", got, want)
	}
}
