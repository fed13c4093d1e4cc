package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestStarterDemoOnSandboxWorker is `make demo` in miniature: the sandbox
// program, an ordinary worker given the environment it hands out, and
// `starter demo` with no CAPSTAN_TASK_QUEUE, so the task keeps to the
// sandbox's own queue and never touches the real one.
//
// Not t.Parallel: it and TestEncryptedDemoTask run `starter demo` on the sandbox's own
// queue, capstan-sandbox, whose worker would take the other's task.
func TestStarterDemoOnSandboxWorker(t *testing.T) {
	var env []string
	for _, kv := range baseEnv(t, "unused") {
		if !strings.HasPrefix(kv, "CAPSTAN_TASK_QUEUE=") {
			env = append(env, kv)
		}
	}
	sb := startSandboxProgram(t)
	w := startWorker(t, append(append([]string(nil), env...), sb.env...), "--log-format", "text")
	if line := w.stdoutLine("worker "); !strings.HasSuffix(line, `polling task queue "capstan-sandbox"`) {
		t.Errorf("worker line = %q, want it polling capstan-sandbox", line)
	}
	r := runStarter(t, env, "demo", "--json")
	if r.code != 0 {
		t.Fatalf("starter demo exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || len(res.Operations) != 3 || len(res.Deliveries) != 1 {
		t.Fatalf("demo result = %+v", res)
	}
	desc, err := describe(context.Background(), res.WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	if q := desc.GetExecutionConfig().GetTaskQueue().GetName(); q != "capstan-sandbox" {
		t.Errorf("the demo task ran on queue %q, want capstan-sandbox", q)
	}
	if !strings.Contains(r.stderr, "/namespaces/default/workflows/"+res.WorkflowID) {
		t.Errorf("starter demo did not print the UI link; stderr: %s", r.stderr)
	}

	// The effects happened once, in the sandbox program, over HTTP: its
	// counters say so.
	var gh struct {
		BranchesCreated     int `json:"branches_created"`
		FilesWritten        int `json:"files_written"`
		PullRequestsCreated int `json:"pull_requests_created"`
	}
	testenv.GetJSON(t, sb.githubURL+"_sandbox/stats", &gh)
	if gh.BranchesCreated != 1 || gh.FilesWritten != 1 || gh.PullRequestsCreated != 1 {
		t.Errorf("sandbox github stats = %+v, want 1/1/1", gh)
	}
	var sl struct {
		MessagesPosted int `json:"messages_posted"`
	}
	testenv.GetJSON(t, strings.TrimSuffix(sb.slackURL, "api/")+"_sandbox/stats", &sl)
	if sl.MessagesPosted != 1 {
		t.Errorf("sandbox slack stats = %+v, want 1 message", sl)
	}

	// status of the finished task reads the same result.
	st := runStarter(t, env, "status", res.TaskID, "--json")
	if st.code != 0 || decodeResult(t, st).Status != workflows.StatusCompleted {
		t.Errorf("starter status: exit %d, %s %s", st.code, st.stdout, st.stderr)
	}
	ls := runStarter(t, env, "list")
	if ls.code != 0 || !strings.Contains(ls.stdout, res.TaskID) {
		t.Errorf("starter list: exit %d, stdout %q, want the task listed", ls.code, ls.stdout)
	}
}

// TestWorkerStartupErrors: one clear sentence and a non-zero exit.
func TestWorkerStartupErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  func([]string) []string
		args []string
		code int
		want string
	}{
		{"missing key", func(e []string) []string { return append(e, "GITHUB_TOKEN=x") }, nil, 1, "OPENAI_API_KEY is not set"},
		{"bad ledger DSN", func(e []string) []string {
			return append(e, "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_LEDGER_DSN=mysql://db/x")
		}, nil, 1, "unsupported scheme"},
		{"ledger server unreachable", func(e []string) []string {
			return append(e, "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_LEDGER_DSN=postgres://capstan:s3cret@127.0.0.1:1/capstan")
		}, nil, 1, `CAPSTAN_LEDGER_DSN "postgres://capstan:xxxxx@127.0.0.1:1/capstan": ledger/postgres: cannot connect to PostgreSQL at 127.0.0.1:1`},
		{"server unreachable", func(e []string) []string {
			return append(e, "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "TEMPORAL_ADDRESS=127.0.0.1:1")
		}, nil, 1, "127.0.0.1:1"},
		{"bad idle timeout", func(e []string) []string {
			return append(e, "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_MODEL_IDLE_TIMEOUT=soon")
		}, nil, 1, "CAPSTAN_MODEL_IDLE_TIMEOUT"},
		{"malformed codec keys", func(e []string) []string {
			return append(e, "OPENAI_API_KEY=x", "GITHUB_TOKEN=x", "CAPSTAN_CODEC_KEYS=k1:not-base64")
		}, nil, 1, `CAPSTAN_CODEC_KEYS: the key of id "k1" is not 32 bytes in standard base64`},
		{"bad flag", func(e []string) []string { return e }, []string{"--frobnicate"}, 2, "frobnicate"},
		{"--sandbox is gone", func(e []string) []string { return e }, []string{"--sandbox"}, 2, "the sandbox is its own program"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runWorkerToExit(t, tc.env(baseEnv(t, "e2e-startup")), tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, tc.code, tc.want)
			}
			if tc.code == 1 && strings.Count(strings.TrimSpace(lastLines(r.stderr)), "\n") != 0 {
				t.Errorf("stderr ends with more than one line of error: %q", r.stderr)
			}
		})
	}
}

// lastLines drops the worker's JSON log lines, keeping what it printed as
// its error.
func lastLines(s string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(l, "{") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestHistoryGrowsLinearly runs sandbox scripts of 1, 5 and 20 turns and
// checks that each turn adds about the same number of history bytes: no
// activity input carries the transcript.
func TestHistoryGrowsLinearly(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-history", sb)
	startWorker(t, env)
	sizes := map[int]int{}
	for _, turns := range []int{1, 5, 20} {
		id := fmt.Sprintf("e2e-history-%d-%d", turns, time.Now().UnixNano())
		r := runStarter(t, env, "run", "--prompt", "Read the README again and again.", "--repo", "capstan-sandbox/demo",
			"--model", fmt.Sprintf("openai:turns-%d", turns), "--id", id, "--max-turns", "25", "--wait", "--json")
		if r.code != 0 {
			t.Fatalf("turns-%d: exit %d\nstdout: %s\nstderr: %s", turns, r.code, r.stdout, r.stderr)
		}
		res := decodeResult(t, r)
		if len(res.Turns) != turns {
			t.Fatalf("turns-%d ran %d turns", turns, len(res.Turns))
		}
		sizes[turns] = proto.Size(fetchHistory(t, res.WorkflowID))
	}
	perTurnEarly := float64(sizes[5]-sizes[1]) / 4
	perTurnLate := float64(sizes[20]-sizes[5]) / 15
	t.Logf("history size: 1 turn %d bytes, 5 turns %d bytes, 20 turns %d bytes; per turn %.0f bytes (turns 2-5) and %.0f bytes (turns 6-20)",
		sizes[1], sizes[5], sizes[20], perTurnEarly, perTurnLate)
	if perTurnLate > 1.25*perTurnEarly {
		t.Errorf("later turns cost %.0f bytes each against %.0f early: history grows faster than linearly", perTurnLate, perTurnEarly)
	}
}
