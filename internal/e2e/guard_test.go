package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/workflows"
)

// TestTurnGuardRetriesOverloadAndFailsOnRejection: an overloaded provider is
// asked again as a new attempt of the same turn; a rejecting one fails the
// task with provider_rejected and the provider's reason.
func TestTurnGuardRetriesOverloadAndFailsOnRejection(t *testing.T) {
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
	if first.Outcome != "overloaded" || first.HTTPStatus != 503 || first.AttemptID != res.TaskID+"/t1/a1" {
		t.Errorf("first attempt = %+v, want overloaded 503 as a1", first)
	}
	if second.Outcome != "completed" || second.AttemptID != res.TaskID+"/t1/a2" {
		t.Errorf("second attempt = %+v, want completed as a2", second)
	}

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
}
