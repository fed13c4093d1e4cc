package activities_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/redact"
	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/tool"
)

// The MCP file's ${VAR} values, as the worker's environment gives them.
const (
	mcpURLToken    = "mcp-url-token-3f9a61d2"
	mcpHeaderToken = "mcp-header-token-a07c44e9"
)

// An MCP server reached at a URL whose query holds a ${VAR} token (and a
// header holding another) drops the connection of the task's call: the
// call's failure,
// which the HTTP client words with the URL it posted to, is masked in the
// failure Temporal records, in the reason the workflow builds from it, in
// the ledger's error column and in every line the activity logged. The
// redactor is the worker's: built from what workerapp.LoadMCP says the
// file holds.
func TestNoSecretOfAnMCPFilesURLLeavesTheWorker(t *testing.T) {
	t.Parallel()
	store := mcpserver.NewStore()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	mcpHandler := mcpserver.Handler(store, mcpserver.Options{Stop: stop})
	// Once broken, every POST (a call) has its connection closed unanswered,
	// while the session's standing GET stream stays up: the client's error
	// is the HTTP client's, which names the URL it posted to, whatever the
	// order in which the client notices. (Closing the whole server races
	// the GET stream, whose end closes the client with an error that
	// quotes no URL.)
	var broken atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() && r.Method == http.MethodPost {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	path := filepath.Join(t.TempDir(), "mcp.json")
	file := fmt.Sprintf(`{"mcpServers": {"sb": {"url": "%s/mcp?token=${TICKETS_TOKEN}",
	  "headers": {"Authorization": "Bearer ${TICKETS_HEADER_TOKEN}"},
	  "capstan": {"call_timeout": "2s", "tools": {"upsert_ticket": {"class": "idempotent"}}}}}}`, srv.URL)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TICKETS_TOKEN": mcpURLToken, "TICKETS_HEADER_TOKEN": mcpHeaderToken}
	cfg, held, err := workerapp.LoadMCP(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	r := redact.New(held...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := mcp.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs bytes.Buffer
	registry := tool.NewRegistry(pool.Tools()...)
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry)
		d.Redactor = r
		// As workerapp.New wraps the worker's logger.
		d.Logger = slog.New(r.Handler(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	})
	broken.Store(true) // the server drops the task's call
	in := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1",
		OperationID: "d:T:t1:mcp__sb__upsert_ticket:1", Tool: "mcp__sb__upsert_ticket",
		Arguments: f.args(t, `{"key":"disk","title":"disk full"}`)}
	_, err = redactingEnv(f.acts, r).ExecuteActivity(f.acts.ExecuteTool, in)
	if err == nil {
		t.Fatal("ExecuteTool succeeded against a server that is gone")
	}
	t.Logf("failure: %v", err)
	for what, text := range map[string]string{
		"the activity's failure": err.Error(),
		// What the workflow records as the operation's reason (workflows.settle).
		"the operation's reason": contract.Describe(err),
		"the log":                logs.String(),
	} {
		if strings.Contains(text, mcpURLToken) || strings.Contains(text, mcpHeaderToken) {
			t.Errorf("%s holds an MCP token: %s", what, text)
		}
	}
	if !strings.Contains(err.Error(), redact.Mask) {
		t.Fatalf("the failure %q quotes no URL: the test no longer shows the token masked", err)
	}
	op, gerr := f.ledger.Get(context.Background(), in.OperationID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if strings.Contains(op.Error, mcpURLToken) || strings.Contains(op.Error, mcpHeaderToken) {
		t.Errorf("the ledger's error column holds an MCP token: %s", op.Error)
	} else if !strings.Contains(op.Error, redact.Mask) {
		t.Errorf("the ledger's error column = %q, want the failure recorded with the token's place masked", op.Error)
	}
}
