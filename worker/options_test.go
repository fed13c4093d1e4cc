package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// TestNewRefusesBeforeConnecting: what New refuses it refuses with one
// sentence, testable with errors.Is, before it dials or opens anything (no
// Temporal server runs here): tools it cannot offer or whose names are
// taken, a codec with a given client, a namespace without one; and the
// fields of Options take precedence over the variables they stand for (a
// valid CAPSTAN_LEDGER_DSN in the environment, a bad LedgerDSN field: the
// field is refused, quoting no password).
func TestNewRefusesBeforeConnecting(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	badPolicy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("rules:\n  - name: broken\n    when: labels[\"env\"] ==\n    effect: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lazy, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	for _, tc := range []struct {
		name string
		o    worker.Options
		env  map[string]string
		is   error  // the sentinel the error matches, if any
		says string // what its sentence names
	}{
		{name: "two tools of one name", o: worker.Options{Tools: []tool.Tool{newTicketTool("tickets_create"), newTicketTool("tickets_create")}},
			is: worker.ErrDuplicateTool, says: `tool "tickets_create" is given twice`},
		{name: "a built-in tool's name", o: worker.Options{Tools: []tool.Tool{newTicketTool("github_put_file")}},
			is: worker.ErrDuplicateTool, says: `tool "github_put_file": the worker has a tool of that name already`},
		{name: "a name with a space", o: worker.Options{Tools: []tool.Tool{newTicketTool("tickets create")}},
			is: worker.ErrInvalidTool, says: `tool name "tickets create" is not 1 to 64 letters`},
		{name: "an MCP tool's name", o: worker.Options{Tools: []tool.Tool{newTicketTool("mcp__tickets__create")}},
			is: worker.ErrInvalidTool, says: "starts with mcp__"},
		{name: "a nil tool", o: worker.Options{Tools: []tool.Tool{nil}}, is: worker.ErrInvalidTool, says: "nil tool.Tool"},
		{name: "codec keys with a given client", o: worker.Options{Client: lazy},
			env: map[string]string{"CAPSTAN_CODEC_KEYS": "2026-12:" + base64.StdEncoding.EncodeToString(key)},
			is:  worker.ErrCodecWithClient, says: "CAPSTAN_CODEC_KEYS is set, but the worker was given a Temporal client"},
		{name: "a namespace without a client", o: worker.Options{Namespace: "tickets"}, is: worker.ErrNamespaceWithoutClient, says: "Options.Namespace"},
		{name: "LedgerDSN over the environment's", o: worker.Options{LedgerDSN: "mysql://app:pw-d41c9e@db.example/tickets"},
			env: map[string]string{"CAPSTAN_LEDGER_DSN": "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")}, says: "CAPSTAN_LEDGER_DSN"},
		{name: "PolicyFile over the environment's", o: worker.Options{PolicyFile: badPolicy},
			env: map[string]string{"CAPSTAN_POLICY": ""}, says: "CAPSTAN_POLICY: policy file " + badPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"OPENAI_API_KEY": "sk-test", "GITHUB_TOKEN": "ghp-test", "CAPSTAN_METRICS_ADDR": "", "CAPSTAN_STREAM_ADDR": ""}
			for k, v := range tc.env {
				env[k] = v
			}
			tc.o.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			w, err := worker.New(context.Background(), tc.o)
			if err == nil {
				w.Close()
				t.Fatal("New = nil error; want a refusal")
			}
			t.Logf("%v", err)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(err, %v) = false", tc.is)
			}
			if !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: want one sentence containing %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "pw-d41c9e") {
				t.Errorf("the error quotes the DSN's password: %v", err)
			}
		})
	}
}
