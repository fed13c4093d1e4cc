package workerapp

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/capstanhq/capstan/internal/config"
)

// refuseDial fails the test if New gets as far as dialling Temporal.
func refuseDial(t *testing.T) DialFunc {
	return func(context.Context, string, tlog.Logger, client.MetricsHandler) (client.Client, client.Options, error) {
		t.Error("New dialled Temporal although the configuration was refused first")
		return nil, client.Options{}, errors.New("refused")
	}
}

// TestNewRefusesABadConfigurationBeforeConnecting: a worker that cannot
// serve is one sentence at start, and nothing was dialled.
func TestNewRefusesABadConfigurationBeforeConnecting(t *testing.T) {
	cfg := config.FromEnv(func(k string) string { return map[string]string{"GITHUB_TOKEN": "g"}[k] })
	_, err := New(context.Background(), Options{Config: cfg, Dial: refuseDial(t)})
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY is not set") {
		t.Fatalf("New = %v, want the missing key named", err)
	}
}

// TestNewRefusesABadPolicyFile: a CAPSTAN_POLICY that does not compile
// stops the worker at start with one sentence naming the file, the line
// and the rule, before anything is served or dialled; a good one passes.
func TestNewRefusesABadPolicyFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - name: fine\n    tool: github_comment\n    effect: deny\n    reason: no\n  - name: broken\n    when: labels[\"env\"] ==\n    effect: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.FromEnv(func(k string) string {
		return map[string]string{"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g", "CAPSTAN_METRICS_ADDR": "", "CAPSTAN_POLICY": bad}[k]
	})
	_, err := New(context.Background(), Options{Config: cfg, Dial: refuseDial(t)})
	if err == nil || !strings.Contains(err.Error(), "CAPSTAN_POLICY: policy file "+bad+", line 7, rule \"broken\"") || strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("New = %v, want one sentence naming %s, line 7, rule \"broken\"", err, bad)
	}
	if _, err := checkPolicy(""); err != nil {
		t.Errorf("no policy file: %v", err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("rules:\n  - name: fine\n    tool: github_comment\n    effect: deny\n    reason: no\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkPolicy(good); err != nil {
		t.Errorf("a good file: %v", err)
	}
}

// TestNewClosesWhatItOpenedOnFailure: the metrics port New listened on is
// free again once a later step (here the dial) fails.
func TestNewClosesWhatItOpenedOnFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := config.FromEnv(func(k string) string {
		return map[string]string{"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g", "CAPSTAN_METRICS_ADDR": addr,
			"CAPSTAN_LEDGER_DSN": "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")}[k]
	})
	dialErr := errors.New("no server here")
	_, err = New(context.Background(), Options{Config: cfg,
		Dial: func(context.Context, string, tlog.Logger, client.MetricsHandler) (client.Client, client.Options, error) {
			return nil, client.Options{}, dialErr
		}})
	if !errors.Is(err, dialErr) {
		t.Fatalf("New = %v, want the dial's error", err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the metrics address is still taken after New failed: %v", err)
	}
	again.Close()
}
