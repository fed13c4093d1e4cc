package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workflows"
)

// TestTurnGuardRetriesOverloadAndFailsOnRejection: an overloaded provider is
// asked again as a new attempt of the same turn; a rejecting one fails the
// task with provider_rejected and the provider's reason.
func TestTurnGuardRetriesOverloadAndFailsOnRejection(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var calls atomic.Int32
	var reject atomic.Bool
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "application/json")
		if reject.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`))
			return true
		}
		if calls.Add(1) == 1 {
			w.Header().Set("retry-after-ms", "20")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"The server is overloaded.","type":"server_error"}}`))
			return true
		}
		return false
	})
	env := endpointEnv(t, "e2e-guard", sb)
	startWorker(t, env)

	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", fmt.Sprintf("e2e-overload-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 2 {
		t.Fatalf("turns = %+v, want one turn of two attempts", res.Turns)
	}
	first, second := res.Turns[0].Attempts[0], res.Turns[0].Attempts[1]
	if first.Outcome != "overloaded" || first.HTTPStatus != 503 || first.AttemptID != res.TaskID+"/"+chainScope(t, res.WorkflowID)+"/t1/a1" {
		t.Errorf("first attempt = %+v, want overloaded 503 as a1", first)
	}
	if second.Outcome != "completed" || second.AttemptID != res.TaskID+"/"+chainScope(t, res.WorkflowID)+"/t1/a2" {
		t.Errorf("second attempt = %+v, want completed as a2", second)
	}
	recordHistory(t, "overload-retry", res.WorkflowID)

	reject.Store(true)
	r = runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", fmt.Sprintf("e2e-reject-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res = decodeResult(t, r)
	if res.Status != workflows.StatusFailed || res.FailureCode != workflows.FailProviderRejected {
		t.Fatalf("result = %+v, want failed with provider_rejected", res)
	}
	if want := "Incorrect API key provided."; !strings.Contains(res.Message, want) || !strings.Contains(res.Message, "HTTP 401") {
		t.Errorf("message = %q, want the status and the provider's reason", res.Message)
	}
	if got := res.Turns[0].Attempts; len(got) != 1 || got[0].Outcome != "rejected" {
		t.Errorf("attempts = %+v, want one rejected attempt (never retried)", got)
	}
	recordHistory(t, "failed", res.WorkflowID)
}

// TestTurnGuardRetriesAnIdleCut: a stream that goes silent after its first
// chunk is cut by the idle watchdog and asked again as a new attempt of the
// same turn; the speculative text of the cut attempt is never committed.
func TestTurnGuardRetriesAnIdleCut(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var calls atomic.Int32
	cut := make(chan struct{})
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if calls.Add(1) != 1 {
			return false
		}
		// Headers and one chunk of text, then silence until the worker
		// gives up on the stream and drops the connection.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`data: {"id":"chatcmpl-stall","object":"chat.completion.chunk","created":0,"model":"hello",` +
			`"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me think"},"finish_reason":null}]}` + "\n\n"))
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(cut)
		return true
	})
	const idleTimeout = 2 * time.Second
	env := append(endpointEnv(t, "e2e-idle", sb), "CAPSTAN_MODEL_IDLE_TIMEOUT="+idleTimeout.String())
	startWorker(t, env)

	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", fmt.Sprintf("e2e-idle-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	select {
	case <-cut:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled stream's connection stayed open after the task completed; the worker never cut it")
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 2 {
		t.Fatalf("result = %+v, want completed with one turn of two attempts", res)
	}
	first, second := res.Turns[0].Attempts[0], res.Turns[0].Attempts[1]
	if first.Outcome != "cut_idle" || first.Phase != "STREAM_PARTIAL" || first.AttemptID != res.TaskID+"/"+chainScope(t, res.WorkflowID)+"/t1/a1" ||
		!strings.Contains(first.Message, idleTimeout.String()) {
		t.Errorf("first attempt = %+v, want cut_idle in STREAM_PARTIAL as a1, saying it was silent for %s", first, idleTimeout)
	}
	if second.Outcome != "completed" || second.AttemptID != res.TaskID+"/"+chainScope(t, res.WorkflowID)+"/t1/a2" {
		t.Errorf("second attempt = %+v, want completed as a2", second)
	}
	if strings.Contains(res.FinalText, "Let me think") || !strings.HasPrefix(res.FinalText, "Hello!") {
		t.Errorf("final_text = %q, want the hello script's answer and nothing of the cut attempt", res.FinalText)
	}
	recordHistory(t, "idle-retry", res.WorkflowID)
}
