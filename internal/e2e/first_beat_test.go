package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestKilledWorkersLongTurnCountsItsLastBeat: a model attempt's first
// heartbeat comes 250 ms in, not as it starts (docs/design.md §4.2), so a
// short turn costs the server none. A long one still beats: its worker,
// killed outright mid-stream, leaves the server the attempt's last beat —
// its phase and the estimate of what it spent — and the task, taken on by
// another worker, abandons the attempt as worker_lost and counts that
// estimate against its budget.
func TestKilledWorkersLongTurnCountsItsLastBeat(t *testing.T) {
	sb := startSandbox(t)
	sb.Model.SetUsage(100, 20) // a completed attempt reports exactly 120 tokens
	var calls atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if calls.Add(1) > 1 {
			return false // the retry: the script's answer
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"hello\","+
			"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Thinking\"},\"finish_reason\":null}]}\n\n")
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done() // until its worker is gone
		return true
	})
	env := append(endpointEnv(t, "e2e-first-beat", sb), "CAPSTAN_HEARTBEAT_TIMEOUT=3s")
	first := startWorker(t, env)
	taskID := fmt.Sprintf("e2e-first-beat-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--idle-timeout", "60s"); r.code != 0 {
		t.Fatalf("starter run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	beat := waitForBeat(t, workflows.WorkflowID(taskID))
	if beat.Phase == "" || beat.Usage.InputTokens <= 0 || !beat.UsageEstimated {
		t.Fatalf("the running attempt's beat = %+v, want its phase and an estimate", beat)
	}
	first.stop(t, syscall.SIGKILL, 10*time.Second)
	startWorker(t, env)
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted || len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 2 {
		t.Fatalf("task = %s (%s) with turns %+v, want completed in one turn of two attempts", res.Status, res.Message, res.Turns)
	}
	if a := res.Turns[0].Attempts[0]; a.AttemptID != beat.AttemptID || a.Outcome != model.OutcomeWorkerLost {
		t.Errorf("first attempt = %+v, want %s abandoned worker_lost", a, beat.AttemptID)
	}
	s := res.Spend
	if want := beat.Usage.InputTokens; s == nil || s.EstimatedTokens != want || s.Tokens != want+120 {
		t.Errorf("spend = %+v, want the lost attempt's estimate %d (from its last beat) and the answer's 120", s, want)
	}
}

// waitForBeat waits until the task's pending ModelTurn carries heartbeat
// details, as `starter follow` reads them, and returns them.
func waitForBeat(t *testing.T, workflowID string) contract.AttemptReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if desc, err := describe(ctx, workflowID); err == nil {
			for _, pa := range desc.GetPendingActivities() {
				var r contract.AttemptReport
				if pa.GetActivityType().GetName() == "ModelTurn" && len(pa.GetHeartbeatDetails().GetPayloads()) > 0 &&
					converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &r) == nil && r.AttemptID != "" {
					return r
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the running model attempt never heartbeat")
		}
	}
}
