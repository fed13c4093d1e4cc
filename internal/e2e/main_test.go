// Package e2e runs capstan end to end: the real worker and starter binaries
// against a real Temporal dev server, with the sandbox's loopback HTTP
// servers standing in for the model provider, GitHub and Slack — started in
// the test process where a test injects faults, or as the sandbox program
// `make demo` runs — and the worker pointed at them through its base-URL
// settings, as at the real services.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
)

var (
	devServerAddr string
	temporal      client.Client
	workerBin     string
	starterBin    string
	sandboxBin    string
	sandboxMCPBin string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// testsAtOnce is how many of the package's tests run side by side (their
// t.Parallel) unless `go test -parallel N` says otherwise. The tests mostly
// wait — on Temporal's timers, backoffs, reconcile windows and outages, in
// other processes — so more of them than the machine's cores (the default,
// 2 on the CI machine) fit: run one after the other they used a fifth of
// two cores. Each test has a task queue, a ledger, a sandbox and worker
// processes of its own (baseEnv refuses a queue two tests would share).
const testsAtOnce = 4

func runMain(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", fmt.Sprint(testsAtOnce)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	ctx := context.Background()
	flags, err := testenv.DevServerFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	srv, err := testenv.StartDevServer(ctx, nil, flags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer srv.Stop()
	devServerAddr, temporal = srv.FrontendHostPort(), srv.Client()
	// Some tests start tasks before any worker of theirs has registered
	// capstan's search attributes; the server has them from the start, as
	// `make demo`'s does.
	if err := workerapp.EnsureSearchAttributes(ctx, temporal, "default", slog.New(slog.DiscardHandler)); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}

	dir, err := os.MkdirTemp("", "capstan-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err := testenv.BuildBinaries(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	workerBin, starterBin, sandboxBin, sandboxMCPBin = bins.Worker, bins.Starter, bins.Sandbox, bins.SandboxMCP
	return m.Run()
}

// onServer is env pointed at the Temporal server at addr instead of the
// shared one: for a test that needs a server of its own.
func onServer(env []string, addr string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "TEMPORAL_ADDRESS=") })
	return append(out, "TEMPORAL_ADDRESS="+addr)
}

// baseEnv is the environment every process of a test gets: the dev server,
// a task queue of the test's own, and nothing from the caller's shell that
// could point a client somewhere else. The tests run side by side, so a
// queue another test (another top-level test) has used fails this one: its
// worker would take the other's tasks.
func baseEnv(t *testing.T, taskQueue string) []string {
	t.Helper()
	claimQueue(t, taskQueue)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"TEMPORAL_ADDRESS=" + devServerAddr,
		"TEMPORAL_NAMESPACE=default",
		"CAPSTAN_TASK_QUEUE=" + taskQueue,
		"CAPSTAN_LEDGER_DSN=sqlite://" + filepath.Join(t.TempDir(), "ledger.db"),
		// Every worker serves metrics, each on a port of its own (it prints
		// the URL: workerProcess.metricsURL); the default port would be
		// shared by every worker of every test.
		"CAPSTAN_METRICS_ADDR=127.0.0.1:0",
		// Likewise the live streams of model attempts (starter follow).
		"CAPSTAN_STREAM_ADDR=127.0.0.1:0",
	}
	return env
}

// queueOwners maps each task queue handed out by baseEnv to the top-level
// test that took it.
var queueOwners = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// claimQueue records queue as the task queue of t's top-level test, and
// fails t if another top-level test has taken it. "unused" is the queue
// of tests that drop CAPSTAN_TASK_QUEUE (they run one at a time: not
// t.Parallel).
func claimQueue(t *testing.T, queue string) {
	t.Helper()
	if queue == "unused" {
		return
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	queueOwners.Lock()
	defer queueOwners.Unlock()
	if owner, ok := queueOwners.m[queue]; ok && owner != top {
		t.Fatalf("task queue %q is %s's too: tests running side by side need queues of their own", queue, owner)
	}
	queueOwners.m[queue] = top
}

// workerProcess is a running worker binary.
type workerProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout []string
	stderr bytes.Buffer
	lines  chan string
	exited chan struct{}
}

// startWorker runs the worker binary and waits until it polls its queue.
// The worker is stopped with SIGTERM at the end of the test.
func startWorker(t *testing.T, env []string, args ...string) *workerProcess {
	t.Helper()
	return startWorkerBin(t, workerBin, env, args...)
}

// startWorkerBin is startWorker with another build of the worker binary.
func startWorkerBin(t *testing.T, bin string, env []string, args ...string) *workerProcess {
	t.Helper()
	w := launchWorker(t, bin, env, args...)
	w.waitFor(t, "polling task queue", 60*time.Second)
	return w
}

// launchWorker runs the worker binary bin and returns at once; waitFor
// waits for what it prints. The worker is stopped with SIGTERM at the end
// of the test.
func launchWorker(t *testing.T, bin string, env []string, args ...string) *workerProcess {
	t.Helper()
	w := &workerProcess{lines: make(chan string, 64), exited: make(chan struct{})}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Env = env
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = &syncWriter{mu: &w.mu, w: &w.stderr}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.stdout = append(w.stdout, sc.Text())
			w.mu.Unlock()
			select {
			case w.lines <- sc.Text():
			default:
			}
		}
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
		if logs := w.logs(); strings.Contains(logs, raceReport) {
			t.Errorf("the race detector reported a data race in the worker:\n%s", logs)
		} else if t.Failed() {
			t.Logf("worker stderr:\n%s", logs)
		}
	})
	return w
}

// waitFor waits until the worker prints a stdout line containing want,
// failing the test if it exits first or within passes.
func (w *workerProcess) waitFor(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line := <-w.lines:
			if strings.Contains(line, want) {
				return
			}
		case <-w.exited:
			t.Fatalf("worker exited before printing %q: %s", want, w.logs())
		case <-deadline:
			t.Fatalf("worker did not print %q within %s: %s", want, within, w.logs())
		}
	}
}

// stop sends sig to the worker — SIGKILL to kill it outright, SIGTERM to stop
// it gracefully — and waits until it has exited.
func (w *workerProcess) stop(t *testing.T, sig syscall.Signal, within time.Duration) *os.ProcessState {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal the worker with %v: %v", sig, err)
	}
	select {
	case <-w.exited:
		return w.cmd.ProcessState
	case <-time.After(within):
		t.Fatalf("the worker did not exit within %s of %v:\n%s", within, sig, w.logs())
		return nil
	}
}

func (w *workerProcess) logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.stdout, "\n") + "\n" + w.stderr.String()
}

// stdoutLine returns the first stdout line starting with prefix.
func (w *workerProcess) stdoutLine(prefix string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.stdout {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// raceReport opens every report of the race detector; the binaries are
// race-built when the tests are (testenv.BuildBinaries).
const raceReport = "WARNING: DATA RACE"

// result of one command run.
type result struct {
	code           int
	stdout, stderr string
}

// runStarter runs the starter binary to completion.
func runStarter(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runToExit(t, starterBin, 3*time.Minute, env, args...)
}

// runWorkerToExit runs the worker binary expecting it to exit by itself.
func runWorkerToExit(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runToExit(t, workerBin, time.Minute, env, args...)
}

func runToExit(t *testing.T, bin string, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if strings.Contains(r.stderr, raceReport) {
		t.Errorf("the race detector reported a data race in %s %v:\n%s", filepath.Base(bin), args, r.stderr)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run %s %v: %v", filepath.Base(bin), args, err)
	}
	return r
}

// sandboxProgram is a running sandbox binary (internal/sandbox/cmd/sandbox),
// as `make demo` runs it.
type sandboxProgram struct {
	env                           []string // what it hands a worker: KEY=value
	modelURL, githubURL, slackURL string
}

// startSandboxProgram runs the sandbox binary and waits until it says it
// serves, reading the URLs and worker environment it printed. It is stopped
// with SIGTERM at the end of the test.
func startSandboxProgram(t *testing.T, args ...string) sandboxProgram {
	t.Helper()
	cmd := exec.Command(sandboxBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	var mu sync.Mutex
	cmd.Stderr = &syncWriter{mu: &mu, w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the sandbox: %v", err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		go func() {
			for range lines { // keep the pipe drained until it exits
			}
		}()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(stderr.String(), raceReport) {
			t.Errorf("the race detector reported a data race in the sandbox:\n%s", stderr.String())
		}
	})
	var sb sandboxProgram
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the sandbox exited before serving: %s", stderr.String())
			case line == "sandbox: serving until SIGINT or SIGTERM":
				if sb.githubURL == "" || len(sb.env) == 0 {
					t.Fatalf("the sandbox printed no URLs or environment: %+v", sb)
				}
				return sb
			case strings.HasPrefix(line, "sandbox: model "):
				f := strings.Fields(line)
				if len(f) != 7 || f[3] != "github" || f[5] != "slack" {
					t.Fatalf("sandbox line = %q, want 'sandbox: model URL  github URL  slack URL'", line)
				}
				sb.modelURL, sb.githubURL, sb.slackURL = f[2], f[4], f[6]
			case strings.HasPrefix(line, "  ") && strings.Contains(line, "="):
				sb.env = append(sb.env, strings.TrimSpace(line))
			}
		case <-deadline:
			t.Fatalf("the sandbox did not serve within 30 s")
		}
	}
}
