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

	"github.com/capstanhq/capstan/activities"
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
// and `starter follow` reads it, so its fields are a contract. The first
// beat makes the attempt known before anything streams; later ones, on the
// ticker, say how far the stream got.
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

	wantKeys := []string{"attempt_id", "chars", "events", "outcome", "phase"} // empty ones are omitted
	first := <-beats
	if want := (contract.AttemptReport{AttemptID: "T/t1/a1", Phase: model.PhaseNotSent}); first.report != want || !reflect.DeepEqual(first.keys, wantKeys) {
		t.Errorf("first beat = %+v with fields %v, want %+v with fields %v", first.report, first.keys, want, wantKeys)
	}
	want := contract.AttemptReport{AttemptID: "T/t1/a1", Phase: model.PhaseStreamPartial, Events: 1, Chars: 8, PreviewTail: "thinking"}
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
