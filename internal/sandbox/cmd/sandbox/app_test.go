package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ghapp"
)

// TestGitHubAppEnvironment: with --github-app the environment gives a
// worker the App's id and key file instead of GITHUB_TOKEN; that key signs
// JWTs the GitHub server takes, naming its bot; the key file is gone at
// exit.
func TestGitHubAppEnvironment(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--github-app", "--github-app-token-lifetime", "30s"}, outW, io.Discard)
		outW.Close()
	}()
	env := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "sandbox: serving until SIGINT or SIGTERM" {
		if l, ok := strings.CutPrefix(sc.Text(), "  "); ok {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if _, ok := env["GITHUB_TOKEN"]; ok || env["CAPSTAN_GITHUB_APP_ID"] != "1" || env["CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE"] == "" {
		t.Fatalf("environment %v: want the App's id and key file, no GITHUB_TOKEN", env)
	}
	cfg := config.FromEnv(func(k string) string { return env[k] })
	if err := cfg.ValidateWorker(); err != nil {
		t.Fatalf("a worker refuses the environment: %v", err)
	}
	key, err := cfg.GitHubApp.Key()
	if err != nil {
		t.Fatal(err)
	}
	src, err := ghapp.New(ghapp.Config{AppID: cfg.GitHubApp.ID, Key: key, BaseURL: env["GITHUB_API_URL"]})
	if err != nil {
		t.Fatal(err)
	}
	if login, err := src.Login(ctx); err != nil || login != "capstan-sandbox[bot]" {
		t.Errorf("Login = %q, %v; want capstan-sandbox[bot]", login, err)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d", c)
	}
	if _, err := os.Stat(env["CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE"]); !os.IsNotExist(err) {
		t.Errorf("the key file outlived the sandbox: %v", err)
	}
}
