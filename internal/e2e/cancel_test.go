package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/capstanhq/capstan/workflows"
)

// TestCancelStopsAStalledTask: `starter cancel` ends a task whose model
// stream has stalled; the waiting `starter run` prints the cancelled result
// and exits 1.
func TestCancelStopsAStalledTask(t *testing.T) {
	sb := startSandbox(t)
	stalled := make(chan struct{}, 1)
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		select {
		case stalled <- struct{}{}:
		default:
		}
		<-r.Context().Done()
		return true
	})
	env := endpointEnv(t, "e2e-cancel", sb)
	startWorker(t, env)

	id := fmt.Sprintf("e2e-cancel-%d", time.Now().UnixNano())
	waited := make(chan result, 1)
	go func() {
		waited <- runStarter(t, env, "run", "--prompt", "think forever", "--model", "openai:hello", "--id", id, "--wait", "--json")
	}()
	select {
	case <-stalled:
	case <-time.After(time.Minute):
		t.Fatal("the model was never called")
	}
	if c := runStarter(t, env, "cancel", id); c.code != 0 {
		t.Fatalf("cancel: exit %d, stderr %q", c.code, c.stderr)
	}
	var r result
	select {
	case r = <-waited:
	case <-time.After(time.Minute):
		t.Fatal("starter run --wait did not return after the cancel")
	}
	if r.code != 1 {
		t.Fatalf("starter run exit = %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCancelled || res.Message == "" {
		t.Fatalf("result = %+v, want cancelled with a message", res)
	}
	if len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 1 || res.Turns[0].Attempts[0].Outcome != "cancelled" {
		t.Errorf("turns = %+v, want one cancelled attempt", res.Turns)
	}
	recordHistory(t, "cancelled", res.WorkflowID)
}
