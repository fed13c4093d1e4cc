package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
)

// helloAnswer is the sandbox's "hello" script's answer.
const helloAnswer = "Hello! I'm capstan's sandbox model. This answer needs no tools, so the task ends here."

// TestFollowShowsAStalledAttemptStruckThenTheAnswerOnce watches a task as a
// person would: `starter follow` in a terminal (tmux, 160 columns wide),
// against a worker whose first model attempt sends some text and then
// stalls until the idle watchdog cuts it. The text reaches the screen
// within a second of the model sending it; the retry counts down; the
// final screen shows the stalled attempt's text once, struck through, with
// its reason, the retry, and the final answer exactly once (as the second
// attempt's committed text, which the result then does not repeat); no
// line is wider than 100 columns.
//
// Not t.Parallel: "within a second" is a wall-clock promise, so the test
// runs while no other test of the package loads the machine.
func TestFollowShowsAStalledAttemptStruckThenTheAnswerOnce(t *testing.T) {
	tmux := requireTmux(t)
	sb := startSandbox(t)
	st := stallFirstAttempt(sb)
	calls, arrived, release, cut := &st.calls, st.arrived, st.release, st.cut
	env := endpointEnv(t, "e2e-follow", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-follow-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--idle-timeout", "4s"); r.code != 0 {
		t.Fatalf("starter run: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the model never received the first attempt's request")
	}

	pane := tmux.run(t, env, 160, 60, starterBin+" follow "+taskID)
	pane.waitFor(t, "t1/a1 streaming", 10*time.Second)
	close(release)
	sent := time.Now()
	pane.waitFor(t, "Let me think about the greeting first.", 5*time.Second)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("the text reached the screen %s after the model sent it, want within 1 s", d.Round(time.Millisecond))
	}
	// The guard's 1 s wait before the second attempt counts down.
	pane.waitFor(t, "(stream idle 4s, attempt 2/2)", 15*time.Second)
	screen := pane.waitFor(t, "[exit ", 90*time.Second)
	select {
	case <-cut:
	default:
		t.Error("the stalled stream's connection is still open after the task ended")
	}
	t.Logf("screen:\n%s", screen)

	if !strings.Contains(screen, "[exit 0]") {
		t.Errorf("starter follow did not exit 0")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the model received %d requests, want 2 (the stalled one and its retry)", n)
	}
	if n := strings.Count(screen, "Let me think"); n != 1 {
		t.Errorf("the stalled attempt's text is on screen %d times, want once", n)
	}
	struck := regexp.MustCompile(`\x1b\[(?:[0-9]+;)*9(?:;[0-9]+)*m[^\n]*Let me think about the greeting first\.`)
	if !struck.MatchString(screen) {
		t.Errorf("the stalled attempt's text is not struck through (no SGR 9 before it)")
	}
	plain := stripANSI(screen)
	for _, want := range []string{
		"t1/a1 abandoned (cut_idle): the stream was silent for 4s",
		"t1/a1 abandoned (cut_idle); retrying in 1s",
		"t1/a2 committed:\n  " + helloAnswer + "\n",
		"task " + taskID + ": completed",
		"final answer: as committed by t1/a2, above",
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("the screen does not say %q", want)
		}
	}
	if n := strings.Count(plain, helloAnswer); n != 1 {
		t.Errorf("the final answer is on screen %d times, want exactly once", n)
	}
	assertFits(t, "starter follow", plain)
}

// stall is a model fault: the first request waits for release, then sends
// some text and stalls until the worker cuts the stream (cut is closed
// then); every later request is served by the script.
type stall struct {
	calls                 atomic.Int32
	arrived, release, cut chan struct{}
}

func stallFirstAttempt(sb *sandbox.Sandbox) *stall {
	st := &stall{arrived: make(chan struct{}), release: make(chan struct{}), cut: make(chan struct{})}
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if st.calls.Add(1) != 1 {
			return false
		}
		close(st.arrived)
		select {
		case <-st.release:
		case <-r.Context().Done():
			return true
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, word := range []string{"Let me think ", "about the ", "greeting first."} {
			_, _ = fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-stall\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"hello\","+
				"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":null}]}\n\n", word)
		}
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done() // silence until the worker cuts the stream
		close(st.cut)
		return true
	})
	return st
}

// TestRunFollowWithoutATerminal: `starter run --follow` into a pipe
// appends the text tagged with its attempt, marks the stalled attempt
// "[abandoned: reason]", and shows the final answer once, in 100 columns.
func TestRunFollowWithoutATerminal(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	st := stallFirstAttempt(sb)
	close(st.release)
	env := endpointEnv(t, "e2e-follow-plain", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-follow-plain-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--idle-timeout", "4s", "--follow")
	t.Logf("stdout:\n%s", r.stdout)
	if r.code != 0 {
		t.Fatalf("starter run --follow: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if n := st.calls.Load(); n != 2 {
		t.Errorf("the model received %d requests, want 2", n)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("the output into a pipe holds escape sequences")
	}
	for _, want := range []string{
		"[t1/a1] Let me think about the greeting first.",
		"[abandoned: cut_idle: the stream was silent for 4s]",
		"t1/a1 abandoned (cut_idle); retrying in 1s",
		"[t1/a2] " + helloAnswer + "\n[t1/a2 committed]\n",
		"task " + taskID + ": completed",
		"final answer: as committed by t1/a2, above",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if n := strings.Count(r.stdout, "Let me think"); n != 1 {
		t.Errorf("the stalled attempt's text is printed %d times, want once", n)
	}
	if n := strings.Count(r.stdout, helloAnswer); n != 1 {
		t.Errorf("the final answer is printed %d times, want exactly once", n)
	}
	assertFits(t, "starter run --follow", r.stdout)
}

// assertFits fails when a line of out is wider than 100 columns.
func assertFits(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(l) > 100 {
			t.Errorf("%s printed a line of %d columns, wider than 100:\n%s", what, utf8.RuneCountInString(l), l)
		}
	}
}

var ansiSequence = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

func stripANSI(s string) string { return ansiSequence.ReplaceAllString(s, "") }

// tmuxServer is a private tmux server of one test.
type tmuxServer struct{ bin, socket string }

// requireTmux finds tmux; without it the test is skipped, except on CI
// (CI=true), where .ci/run installs it and its absence is a failure.
func requireTmux(t *testing.T) *tmuxServer {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tmux is not installed (.ci/run installs it)")
		}
		t.Skip("tmux is not installed")
	}
	dir, err := os.MkdirTemp("", "capstan-tmux")
	if err != nil {
		t.Fatal(err)
	}
	s := &tmuxServer{bin: bin, socket: filepath.Join(dir, "sock")}
	t.Cleanup(func() {
		_ = exec.Command(bin, "-S", s.socket, "kill-server").Run()
		_ = os.RemoveAll(dir)
	})
	return s
}

// tmuxPane is the one pane of a session running a command.
type tmuxPane struct {
	s      *tmuxServer
	target string
}

// run starts command in a new session cols×rows wide; the pane stays after
// the command ends, showing "[exit N]".
func (s *tmuxServer) run(t *testing.T, env []string, cols, rows int, command string) *tmuxPane {
	t.Helper()
	cmd := exec.Command(s.bin, "-S", s.socket, "-f", "/dev/null", "-u", "new-session", "-d", "-s", "follow",
		"-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), "sh", "-c", command+`; echo "[exit $?]"; exec sleep 600`)
	cmd.Env = append(env, "TERM=xterm-256color", "LANG=C.UTF-8")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	return &tmuxPane{s: s, target: "follow"}
}

// capture returns the pane's whole history and screen, with its styles as
// escape sequences.
func (p *tmuxPane) capture(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.s.bin, "-S", p.s.socket, "capture-pane", "-p", "-e", "-S", "-", "-t", p.target).Output()
	if err != nil {
		t.Fatalf("tmux capture-pane: %v", err)
	}
	return string(out)
}

// waitFor captures the pane until it shows want and returns that capture.
// A terminal screen sends no event: it is polled, every 20 ms.
func (p *tmuxPane) waitFor(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		screen := p.capture(t)
		if strings.Contains(stripANSI(screen), want) {
			return screen
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen did not show %q within %s:\n%s", want, within, stripANSI(screen))
		}
		<-tick.C
	}
}

// TestRunWaitKeepsTalkingWithoutATerminal: `starter run --wait` into pipes
// says on stderr what the task does at least every 30 s while it waits, so
// an unattended runner that kills silent jobs never kills it. The model
// holds the first request for longer than that.
//
// Not t.Parallel: the 30 s are counted on the wall clock from the
// starter's launch, its start-up included, so the test runs while no other
// test of the package loads the machine.
func TestRunWaitKeepsTalkingWithoutATerminal(t *testing.T) {
	sb := startSandbox(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if calls.Add(1) == 1 {
			close(arrived)
			select { // then the script answers
			case <-release:
			case <-r.Context().Done():
				return true
			}
		}
		return false
	})
	env := endpointEnv(t, "e2e-keep-talking", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-keep-talking-%d", time.Now().UnixNano())
	cmd := exec.Command(starterBin, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID,
		"--idle-timeout", "50s", "--max-duration", "2m", "--wait")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the model never received the first request")
	}
	progress := regexp.MustCompile(`^\d\d:\d\d:\d\d task ` + regexp.QuoteMeta(taskID) + ` running: `)
	select {
	case line := <-lines:
		if !progress.MatchString(line) {
			t.Errorf("stderr line %q is not a progress line", line)
		}
		if d := time.Since(started); d > 30*time.Second {
			t.Errorf("the first progress line came %s after the start, want within 30 s", d.Round(time.Second))
		}
	case <-time.After(35 * time.Second):
		t.Fatal("starter run --wait said nothing on stderr for 35 s while the task waited")
	}
	close(release)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("starter run --wait: %v\nstdout: %s", err, stdout.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("starter run --wait did not end with the task")
	}
	if !strings.Contains(stdout.String(), "task "+taskID+": completed") {
		t.Errorf("stdout does not report the task completed:\n%s", stdout.String())
	}
	assertFits(t, "starter run --wait", stdout.String())
}

// TestFollowAcrossWorkers: a task whose first attempt streams on one
// worker and, that worker stopped, whose second attempt streams on
// another: the follower reads each attempt's text from the hub of the
// worker that runs it, shows the first abandoned and the second's answer
// once.
//
// Not t.Parallel: the second attempt streams for under a second, and the
// follower must poll within it, so the test runs while no other test of
// the package loads the machine.
func TestFollowAcrossWorkers(t *testing.T) {
	sb := startSandbox(t)
	var calls atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		chunk := func(delta, finish string) {
			f := "null"
			if finish != "" {
				f = fmt.Sprintf("%q", finish)
			}
			_, _ = fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"hello\","+
				"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":%s}]}\n\n", delta, f)
			_ = rc.Flush()
		}
		if calls.Add(1) == 1 {
			chunk("Thinking on the first worker.", "")
			<-r.Context().Done() // until that worker goes away
			return true
		}
		// The second attempt speaks slowly, as a model does, so that it
		// streams for longer than the follower's poll.
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for _, word := range []string{"Answer ", "from ", "the ", "second ", "worker."} {
			chunk(word, "")
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return true
			}
		}
		chunk("", "stop")
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
		return true
	})
	env := append(endpointEnv(t, "e2e-follow-pool", sb), "CAPSTAN_HEARTBEAT_TIMEOUT=5s")
	first := startWorker(t, env, "--stop-timeout", "1s")

	taskID := fmt.Sprintf("e2e-follow-pool-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--idle-timeout", "60s"); r.code != 0 {
		t.Fatalf("starter run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	cmd := exec.Command(starterBin, "follow", taskID)
	cmd.Env = env
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	out.waitFor(t, "[t1/a1] Thinking on the first worker.", 30*time.Second)

	second := startWorker(t, env)
	first.stop(t, syscall.SIGTERM, 30*time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("starter follow: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("starter follow did not end with the task:\n%s", out.String())
	}
	t.Logf("follow:\n%s", out.String())

	hubA, hubB := first.stdoutLine("live stream: "), second.stdoutLine("live stream: ")
	if hubA == "" || hubA == hubB {
		t.Fatalf("the workers serve live streams at %q and %q, want two hubs", hubA, hubB)
	}
	got := out.String()
	for _, want := range []string{
		"[t1/a1] Thinking on the first worker.",
		"[t1/a2] Answer from the second worker.",
		"final answer: as committed by t1/a2, above",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the follower does not show %q", want)
		}
	}
	if !regexp.MustCompile(`\[abandoned: (worker_lost|cancelled): `).MatchString(got) {
		t.Errorf("the first attempt is not marked abandoned with its reason")
	}
	if n := strings.Count(got, "Answer from the second worker."); n != 1 {
		t.Errorf("the answer is shown %d times, want once", n)
	}
	assertFits(t, "starter follow", got)
}

// syncBuffer collects a process's output as it comes.
type syncBuffer struct{ testenv.Buffer }

// waitFor polls the output until it holds want: a pipe's reader has no
// event to wait on but the bytes themselves.
func (b *syncBuffer) waitFor(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the output did not show %q within %s:\n%s", want, within, b.String())
		}
		<-tick.C
	}
}
