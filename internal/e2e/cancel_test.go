package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestCancelStopsAStalledTask: `starter cancel` ends a task whose model
// stream has stalled; the waiting `starter run` prints the cancelled result
// and exits 1.
func TestCancelStopsAStalledTask(t *testing.T) {
	t.Parallel()
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

// TestCancelReconcilesWhatWasInFlight: a task cancelled while GitHub is
// opening its pull request (the request was sent, the answer is held) marks
// the operation UNKNOWN, reconciles it before the task ends, and lists it
// as found in the cancelled task's result. Nothing is sent again.
func TestCancelReconcilesWhatWasInFlight(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDelay, Delay: 5 * time.Minute, Times: 1}); err != nil {
		t.Fatal(err)
	}
	env := append(endpointEnv(t, "e2e-cancel-inflight", sb), "CAPSTAN_HEARTBEAT_TIMEOUT=3s", "CAPSTAN_RECONCILE_WINDOW=2s")
	startWorker(t, env)

	id := fmt.Sprintf("e2e-cancel-inflight-%d", time.Now().UnixNano())
	waited := make(chan result, 1)
	go func() {
		waited <- runStarter(t, env, "run", "--prompt", "open a pull request", "--repo", "capstan-sandbox/demo",
			"--model", "openai:demo", "--id", id, "--wait", "--json")
	}()
	// The fake holds its answer once the pull request exists; nothing
	// signals that from the worker's side, so watch the fake's counter.
	r := cancelOnce(t, env, id, waited, "the pull request was never created", time.Minute,
		func() bool { return sb.GitHub.Stats().PullRequestsCreated > 0 })
	res := decodeResult(t, r)
	if r.code != 1 || res.Status != workflows.StatusCancelled {
		t.Fatalf("exit %d, result %+v; want a cancelled task", r.code, res)
	}
	var pr *workflows.OperationRecord
	for i, op := range res.Operations {
		if op.Tool == "github_create_pull_request" {
			pr = &res.Operations[i]
		}
	}
	if pr == nil || pr.State != capstan.OutcomeSucceeded || !pr.Recovered || !strings.Contains(pr.ExternalID, "/pull/1") {
		t.Fatalf("pull request operation = %+v, want it found and SUCCEEDED, recovered, after the cancel", pr)
	}
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 || st.BranchesCreated != 1 || st.FilesWritten != 1 {
		t.Errorf("github stats = %+v, want exactly 1 branch, 1 file, 1 pull request", st)
	}
}

// cancelOnce waits (polling, within limit) until reached, then cancels task
// id and returns what its `starter run --wait` (waited) ended with; the
// test fails with never if reached stays false.
func cancelOnce(t *testing.T, env []string, id string, waited <-chan result, never string, limit time.Duration, reached func() bool) result {
	t.Helper()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(limit)
	for !reached() {
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatal(never)
		}
	}
	if c := runStarter(t, env, "cancel", id); c.code != 0 {
		t.Fatalf("cancel: exit %d, stderr %q", c.code, c.stderr)
	}
	select {
	case r := <-waited:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("starter run --wait did not return after the cancel")
	}
	return result{}
}
