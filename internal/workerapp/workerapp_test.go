package workerapp

import (
	"context"
	"errors"
	"net"
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
