package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// inNamespace is env pointed at namespace ns instead of "default".
func inNamespace(env []string, ns string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "TEMPORAL_NAMESPACE=") })
	return append(out, "TEMPORAL_NAMESPACE="+ns)
}

// A worker started before its namespace exists waits for it, saying so
// once, rather than exiting: the namespace is created with the CLI once
// the worker says it waits, the worker then polls, and a task started
// there completes.
func TestWorkerWaitsForANamespaceCreatedAfterIt(t *testing.T) {
	t.Parallel()
	ns := fmt.Sprintf("late-%d", time.Now().UnixNano())
	sb := startSandbox(t)
	env := inNamespace(endpointEnv(t, "namespace-late", sb), ns)
	w := launchWorker(t, workerBin, env)
	w.waitFor(t, "waiting for namespace "+ns+" to be visible", 60*time.Second)

	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, "operator", "namespace", "create", "--namespace", ns, "--address", devServerAddr).CombinedOutput(); err != nil {
		t.Fatalf("temporal operator namespace create: %v\n%s", err, out)
	}
	w.waitFor(t, "polling task queue", 60*time.Second)
	if n := strings.Count(w.logs(), "waiting for namespace "+ns); n != 1 {
		t.Errorf("the worker said %d times that it waits for the namespace, want once:\n%s", n, w.logs())
	}

	taskID := fmt.Sprintf("namespace-late-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting, open a pull request and tell the team.",
		"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", "#capstan-e2e",
		"--model", "openai:demo", "--id", taskID, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run in namespace %s exited %d\nstdout: %s\nstderr: %s", ns, r.code, r.stdout, r.stderr)
	}
	if res := decodeResult(t, r); res.Status != workflows.StatusCompleted || res.TaskID != taskID {
		t.Fatalf("result = %+v, want completed task %s", res, taskID)
	}
	if gh := sb.GitHub.Stats(); gh.PullRequestsCreated != 1 {
		t.Errorf("github stats = %+v, want 1 pull request", gh)
	}
}

// A worker whose namespace never appears says once that it waits, and
// exits 1 after CAPSTAN_NAMESPACE_WAIT with one sentence naming the
// namespace, the bound and how to create it.
func TestWorkerGivesUpOnANamespaceThatNeverAppears(t *testing.T) {
	t.Parallel()
	ns := fmt.Sprintf("never-%d", time.Now().UnixNano())
	env := append(inNamespace(endpointEnv(t, "namespace-never", startSandbox(t)), ns), "CAPSTAN_NAMESPACE_WAIT=2s")
	start := time.Now()
	r := runWorkerToExit(t, env)
	took := time.Since(start)
	if r.code != 1 {
		t.Fatalf("worker exited %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout, "waiting for namespace "+ns+" to be visible"); n != 1 {
		t.Errorf("stdout says %d times that the worker waits, want once:\n%s", n, r.stdout)
	}
	var sentence string
	for line := range strings.Lines(r.stderr) {
		if strings.HasPrefix(line, "worker: ") {
			sentence = strings.TrimSpace(line)
		}
	}
	want := "worker: namespace not visible: the Temporal server did not serve namespace " + ns + " within 2s (CAPSTAN_NAMESPACE_WAIT); " +
		"create it (`temporal operator namespace create --namespace " + ns + "`) or set TEMPORAL_NAMESPACE to one that exists"
	if sentence != want {
		t.Errorf("the worker's last word = %q\nwant %q\nstderr: %s", sentence, want, r.stderr)
	}
	if took < 2*time.Second {
		t.Errorf("the worker gave up after %s, before its 2s bound", took)
	}
}
