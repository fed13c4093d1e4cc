package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestServesAndHandsOutTheWorkerEnvironment: the program writes the env
// file and prints the same lines once its servers listen; the URLs in them
// answer; at the end the file is gone and the exit code is 0.
func TestServesAndHandsOutTheWorkerEnvironment(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "sandbox.env")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--env-file", envFile, "--task-queue", "demo-queue"}, outW, &stderr)
		outW.Close()
	}()

	// Read stdout up to the line that says it is serving.
	var printed []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "sandbox: serving until SIGINT or SIGTERM" {
		if l, ok := strings.CutPrefix(sc.Text(), "  "); ok {
			printed = append(printed, l)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatalf("the env file was not written before the sandbox said it serves: %v; stderr %s", err, stderr.String())
	}
	written := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !slices.Equal(written, printed) {
		t.Errorf("env file %q differs from the printed environment %q", written, printed)
	}
	env := map[string]string{}
	for _, kv := range written {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["CAPSTAN_TASK_QUEUE"] != "demo-queue" {
		t.Errorf("CAPSTAN_TASK_QUEUE = %q, want demo-queue", env["CAPSTAN_TASK_QUEUE"])
	}
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "SLACK_BOT_TOKEN"} {
		if env[k] != sandbox.Token {
			t.Errorf("%s = %q, want the sandbox token", k, env[k])
		}
	}
	var gh map[string]int
	testenv.GetJSON(t, env["GITHUB_API_URL"]+"_sandbox/stats", &gh)
	var sl map[string]int
	testenv.GetJSON(t, strings.TrimSuffix(env["SLACK_API_URL"], "api/")+"_sandbox/stats", &sl)
	var model map[string]any
	testenv.GetJSON(t, env["ANTHROPIC_BASE_URL"]+"_sandbox/stats", &model)
	if !strings.HasSuffix(env["OPENAI_BASE_URL"], "/v1") || strings.TrimSuffix(env["OPENAI_BASE_URL"], "v1") != env["ANTHROPIC_BASE_URL"] {
		t.Errorf("OPENAI_BASE_URL %q is not ANTHROPIC_BASE_URL %q plus v1", env["OPENAI_BASE_URL"], env["ANTHROPIC_BASE_URL"])
	}

	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d; stderr %s", c, stderr.String())
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Errorf("the env file outlived the sandbox: %v", err)
	}
}

// TestRefusesTheRealTaskQueue: the environment it hands out never puts a
// worker pointed at the fakes on the queue real tasks use.
func TestRefusesTheRealTaskQueue(t *testing.T) {
	for _, args := range [][]string{{"--task-queue", "capstan"}, {"--task-queue", " "}, {"extra"}} {
		var stderr bytes.Buffer
		if c := run(context.Background(), args, io.Discard, &stderr); c != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %s", args, c, stderr.String())
		}
	}
	var stderr bytes.Buffer
	run(context.Background(), []string{"--task-queue", "capstan"}, io.Discard, &stderr)
	if !strings.Contains(stderr.String(), "must not be capstan, the queue of real tasks") {
		t.Errorf("stderr %q does not say why", stderr.String())
	}
}

// TestAPortInUseFailsTheStart: one sentence naming the server, exit 1.
func TestAPortInUseFailsTheStart(t *testing.T) {
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	taken := strings.TrimSuffix(strings.TrimPrefix(sb.GitHubURL, "http://"), "/")
	var stderr bytes.Buffer
	if c := run(context.Background(), []string{"--github-addr", taken}, io.Discard, &stderr); c != 1 ||
		!strings.Contains(stderr.String(), "github fake: listen on "+taken) {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the github fake and %s", c, stderr.String(), taken)
	}
}
