package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHumanOutputStripsTerminalControls: a model whose error message and
// final answer carry terminal escape sequences (a window title, a screen
// clear, colours, a C1 CSI, backspaces) cannot drive the terminal of the
// person reading `starter run --wait` or `starter status`: their output
// holds no control character but newline and tab, and keeps the text
// around the sequences; `status --json` keeps the answer exactly.
func TestHumanOutputStripsTerminalControls(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	const (
		message = "overloaded \x1b]0;owned title\x07\x1b[2J right now"
		answer  = "Done.\x1b]0;owned title\x07 \x1b[2J\x1b[31mred text\x1b[0m and \u009b31mC1 too\x08\x08. Tabs\tstay.\r\nSecond line."
	)
	var calls atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": message, "type": "server_error"}})
			_, _ = w.Write(b)
			return true
		}
		streamText(w, answer, "stop")
		return true
	})
	env := endpointEnv(t, "e2e-escapes", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-escapes-%d", time.Now().UnixNano())
	run := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--wait")
	if run.code != 0 {
		t.Fatalf("starter run --wait: exit %d\nstdout: %q\nstderr: %s", run.code, run.stdout, run.stderr)
	}
	status := runStarter(t, env, "status", taskID)
	if status.code != 0 {
		t.Fatalf("starter status: exit %d\nstdout: %q\nstderr: %s", status.code, status.stdout, status.stderr)
	}
	for what, out := range map[string]string{"run --wait": run.stdout, "status": status.stdout} {
		t.Logf("%s:\n%s", what, out)
		if i := strings.IndexFunc(out, func(r rune) bool {
			return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f)
		}); i >= 0 {
			t.Errorf("%s printed control character %q: %q", what, out[i:i+1], out[max(i-20, 0):min(i+30, len(out))])
		}
		for _, gone := range []string{"owned title", "[2J", "[31m", "31mC1"} {
			if strings.Contains(out, gone) {
				t.Errorf("%s printed %q: the escape sequence's remains", what, gone)
			}
		}
		words := strings.Join(strings.Fields(out), " ") // as wrapped at any width
		if !strings.Contains(words, "Done. red text and C1 too. Tabs stay. Second line.") {
			t.Errorf("%s did not print the answer's text around the sequences", what)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(run.stdout), " "), ": overloaded right now (overload 1/5)") {
		t.Errorf("run --wait did not print the journal's retry line with the provider's message, cleaned")
	}
	res := decodeResult(t, runStarter(t, env, "status", taskID, "--json"))
	if res.FinalText != answer {
		t.Errorf("status --json final text = %q, want it exactly as the model sent it: %q", res.FinalText, answer)
	}
}
