package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
)

// A configuration the starter refuses is one sentence that never quotes
// the secret it refuses: a codec key written before its id.
func TestStarterConfigErrorQuotesNoSecret(t *testing.T) {
	t.Parallel()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	key := base64.StdEncoding.EncodeToString(b)
	env := map[string]string{"CAPSTAN_CODEC_KEYS": key + ":2026-12", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"status", "some-task"}, func(k string) string { return env[k] }, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), "starter: CAPSTAN_CODEC_KEYS") || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want exit 1 and one sentence naming CAPSTAN_CODEC_KEYS", code, stderr.String())
	}
	if strings.Contains(stderr.String(), key) || strings.Contains(stdout.String(), key) {
		t.Errorf("the starter printed the key: %s%s", stdout.String(), stderr.String())
	}
}
