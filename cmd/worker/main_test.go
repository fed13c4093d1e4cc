package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// workerEnv is an environment a worker would start with, changed by
// over; a key set to "" is unset.
func workerEnv(t *testing.T, over map[string]string) func(string) (string, bool) {
	t.Helper()
	env := map[string]string{
		"OPENAI_API_KEY":       "sk-test-key",
		"GITHUB_TOKEN":         "ghp-test-token",
		"CAPSTAN_LEDGER_DSN":   "sqlite://" + filepath.Join(t.TempDir(), "ledger.db"),
		"CAPSTAN_METRICS_ADDR": "127.0.0.1:0",
		"CAPSTAN_STREAM_ADDR":  "127.0.0.1:0",
		// Nothing listens here: a worker that got as far as dialling
		// fails, having announced what it serves.
		"TEMPORAL_ADDRESS": closedAddr(t),
	}
	for k, v := range over {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	// The Temporal client reads its settings from the process's
	// environment (config.DialTemporal), not from lookupEnv.
	t.Setenv("TEMPORAL_ADDRESS", env["TEMPORAL_ADDRESS"])
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func codecKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// runWorker runs the worker's main with env and returns its exit code,
// standard output and the sentence it ended with (the last line of its
// standard error, the rest being log lines).
func runWorker(t *testing.T, env func(string) (string, bool)) (code int, stdout, sentence, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run(nil, env, &out, &errs)
	lines := strings.Split(strings.TrimRight(errs.String(), "\n"), "\n")
	return code, out.String(), lines[len(lines)-1], errs.String()
}

// A configuration the worker refuses is one sentence naming what is
// wrong, and neither it nor a line the worker logged quotes a secret it
// refuses or holds: a codec key given before its id, a key in a base URL's
// query, an MCP server's URL whose ${VAR} token it cannot reach, a stdio
// MCP server that writes its token to its standard error (logged line by
// line) and exits.
func TestConfigErrorsQuoteNoSecret(t *testing.T) {
	key := codecKey(t)
	const urlKey, mcpToken, stdioToken = "gw-query-key-77aa01", "mcp-url-token-5b2c9d", "mcp-stdio-token-e81f07"
	for _, tc := range []struct {
		name, secret, names string
		env                 map[string]string
	}{
		{"codec key before its id", key, "CAPSTAN_CODEC_KEYS", map[string]string{"CAPSTAN_CODEC_KEYS": key + ":2026-12"}},
		{"key in a refused base URL", urlKey, "ANTHROPIC_BASE_URL", map[string]string{"ANTHROPIC_BASE_URL": "ftp://gw.example/v1?key=" + urlKey}},
		{"key in OPENAI_BASE_URL's query", urlKey, "OPENAI_BASE_URL", map[string]string{"OPENAI_BASE_URL": "gw.example/v1?key=" + urlKey}},
		{"MCP url with a token, unreachable", mcpToken, "CAPSTAN_MCP_CONFIG", map[string]string{
			"CAPSTAN_MCP_CONFIG": writeFile(t, "mcp.json", fmt.Sprintf(`{"mcpServers": {"tickets": {"url": "http://%s/mcp?token=${TICKETS_TOKEN}"}}}`, closedAddr(t))),
			"TICKETS_TOKEN":      mcpToken}},
		{"stdio MCP server logging its token", stdioToken, "CAPSTAN_MCP_CONFIG", map[string]string{
			"CAPSTAN_MCP_CONFIG": writeFile(t, "mcp.json", `{"mcpServers": {"tickets": {"command": "sh",
			  "args": ["-c", "echo \"starting with token $TOKEN\" >&2; exit 3"], "env": {"TOKEN": "${TICKETS_TOKEN}"}}}}`),
			"TICKETS_TOKEN": stdioToken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v) // the process's environment too, which an MCP file's ${VAR} may be read from
			}
			code, _, sentence, stderr := runWorker(t, workerEnv(t, tc.env))
			if code != 1 || !strings.HasPrefix(sentence, "worker: ") || !strings.Contains(sentence, tc.names) {
				t.Fatalf("exit %d, sentence %q; want exit 1 and one sentence naming %s", code, sentence, tc.names)
			}
			t.Logf("%s", sentence)
			if strings.Contains(stderr, tc.secret) {
				t.Errorf("the worker printed the secret:\n%s", stderr)
			}
			if tc.name == "stdio MCP server logging its token" && !strings.Contains(stderr, "starting with token [redacted]") {
				t.Errorf("the worker did not log the server's line with its token masked:\n%s", stderr)
			}
		})
	}
}

// A bad configuration starts nothing: the worker exits 1 with one
// sentence, and never announced (so never opened) its metrics or live
// stream endpoint, nor logged serving them. The same environment with a
// good configuration announces both before it fails to reach Temporal,
// so the absence is not blindness.
func TestBadConfigurationStartsNothing(t *testing.T) {
	t.Run("good configuration", func(t *testing.T) {
		code, stdout, sentence, stderr := runWorker(t, workerEnv(t, nil))
		if code != 1 || !strings.Contains(stdout, "metrics") || !strings.Contains(stdout, "live stream") {
			t.Fatalf("exit %d, stdout %q, sentence %q; want both endpoints announced, then the dial refused\n%s", code, stdout, sentence, stderr)
		}
	})
	for _, tc := range []struct {
		name, names string
		env         map[string]string
	}{
		{"MCP file", "CAPSTAN_MCP_CONFIG", map[string]string{"CAPSTAN_MCP_CONFIG": writeFile(t, "mcp.json", `{"mcpServers": {"tickets": {"command": "true", "colour": "blue"}}}`)}},
		{"MCP file naming an unset variable", "CAPSTAN_MCP_CONFIG", map[string]string{"CAPSTAN_MCP_CONFIG": writeFile(t, "mcp.json", `{"mcpServers": {"tickets": {"url": "http://127.0.0.1:1/mcp?token=${NOT_SET_ANYWHERE}"}}}`)}},
		{"ledger DSN", "CAPSTAN_LEDGER_DSN", map[string]string{"CAPSTAN_LEDGER_DSN": "mysql://db.example/capstan"}},
		{"codec key", "CAPSTAN_CODEC_KEYS", map[string]string{"CAPSTAN_CODEC_KEYS": "2026-12:not-a-key"}},
		{"policy file", "CAPSTAN_POLICY", map[string]string{"CAPSTAN_POLICY": writeFile(t, "policy.yaml", "rules:\n  - name: broken\n    when: labels[\"env\"] ==\n    effect: allow\n")}},
		{"GitHub App key", "CAPSTAN_GITHUB_APP_PRIVATE_KEY", map[string]string{"GITHUB_TOKEN": "", "CAPSTAN_GITHUB_APP_ID": "12345", "CAPSTAN_GITHUB_APP_PRIVATE_KEY": "not a pem key"}},
		{"limits", "CAPSTAN_MODEL_", map[string]string{"CAPSTAN_MODEL_IDLE_TIMEOUT": "20m", "CAPSTAN_MODEL_MAX_DURATION": "10m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, sentence, stderr := runWorker(t, workerEnv(t, tc.env))
			if code != 1 || !strings.HasPrefix(sentence, "worker: ") || !strings.Contains(sentence, tc.names) {
				t.Fatalf("exit %d, sentence %q; want exit 1 and one sentence naming %s\n%s", code, sentence, tc.names, stderr)
			}
			if stdout != "" {
				t.Errorf("the worker announced what it serves before refusing its configuration:\n%s", stdout)
			}
			for _, served := range []string{"metrics served", "live streams served"} {
				if strings.Contains(stderr, served) {
					t.Errorf("the worker logged %q before refusing its configuration:\n%s", served, stderr)
				}
			}
		})
	}
}
