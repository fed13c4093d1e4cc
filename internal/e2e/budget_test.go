package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workflows"
)

// TestTokenBudgetStopsTheTask (issue 15, budgets): with the sandbox model
// reporting 120 tokens a call (100 in, 20 out) and --max-tokens 300, the
// task sends three model requests — 120, 240, then 360 tokens spent — and
// ends budget_exhausted before a fourth, which the sandbox never sees.
func TestTokenBudgetStopsTheTask(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	sb.Model.SetUsage(100, 20)
	env := endpointEnv(t, "e2e-budget", sb)
	w := startWorker(t, env)
	url := w.metricsURL(t)

	taskID := fmt.Sprintf("e2e-budget-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Read the README, again and again.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:turns-10", "--max-tokens", "300",
		"--id", taskID, "--wait", "--json")
	if r.code != 1 {
		t.Fatalf("starter run exited %d, want 1 (the task failed)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusFailed || res.FailureCode != workflows.FailBudgetExhausted {
		t.Fatalf("result = %s %s: %s; want failed budget_exhausted", res.Status, res.FailureCode, res.Message)
	}
	if got := sb.Model.Stats().ScriptRequests["turns-10"]; got != 3 {
		t.Errorf("the sandbox model received %d requests, want exactly 3", got)
	}
	s := res.Spend
	if s == nil || s.Tokens != 360 || s.EstimatedTokens != 0 || s.Requests != 3 || s.MaxTokens != 300 {
		t.Fatalf("spend = %+v, want 360 reported tokens over 3 requests against 300", s)
	}
	if len(res.Operations) != 3 {
		t.Errorf("operations = %+v, want the three reads the three answers asked for", res.Operations)
	}
	for _, want := range []string{"360 tokens of its 300-token budget", "3 model request(s) over 3 turn(s)", "3 tool operation(s)"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q does not say %q", res.Message, want)
		}
	}
	t.Logf("sandbox requests %d; spend %+v; message: %s", sb.Model.Stats().ScriptRequests["turns-10"], *s, res.Message)
	// The worker's metrics carry the spend per task queue.
	q := map[string]string{"task_queue": "e2e-budget"}
	waitForMetric(t, url, "capstan_budget_exhausted_total", q, 1)
	sc := waitForMetric(t, url, "capstan_task_tokens_total", map[string]string{"task_queue": "e2e-budget", "kind": "reported"}, 360)
	if v, _ := sc.Value("capstan_task_tokens_total", map[string]string{"task_queue": "e2e-budget", "kind": "reported"}); v != 360 {
		t.Errorf("capstan_task_tokens_total{kind=reported} = %v, want 360", v)
	}
	st := runStarter(t, env, "status", taskID)
	if !strings.Contains(st.stdout, "spent: 360 of 300 tokens (3 requests, 0 estimated)") {
		t.Errorf("starter status does not show the spend:\n%s", st.stdout)
	}
}
