package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/tool"
)

// environmentVar, set, makes the test binary an MCP server over stdio whose
// one tool, environment, answers the process's environment; its
// serverInfo.name is serverNameVar's value, else "environment".
const (
	environmentVar = "CAPSTAN_TEST_MCP_ENVIRONMENT"
	serverNameVar  = "CAPSTAN_TEST_MCP_SERVER_NAME"
)

// serveEnvironment is that server.
func serveEnvironment() error {
	name := cmp.Or(os.Getenv(serverNameVar), "environment")
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "environment"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, map[string]string, error) {
		vars := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		return nil, vars, nil
	})
	return s.Run(context.Background(), &sdk.StdioTransport{})
}

// workerSecrets are variables a worker holds that no MCP server is given
// unless its configuration says so.
var workerSecrets = []string{
	"GITHUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN",
	"CAPSTAN_CODEC_KEYS", "CAPSTAN_GITHUB_APP_PRIVATE_KEY", "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE",
	"CAPSTAN_LEDGER_DSN", "CAPSTAN_STREAM_TOKEN", "TEMPORAL_API_KEY",
}

// A stdio server starts from BaseEnv, what its capstan.inherit_env names
// and its own env: with a worker's environment set, none of the worker's
// secrets reach it, nor the value another server's ${VAR} expands to.
func TestStdioServerGetsNoSecretItWasNotGiven(t *testing.T) {
	for _, k := range workerSecrets {
		t.Setenv(k, "secret-of-"+k)
	}
	for k, v := range map[string]string{
		"TEMPORAL_ADDRESS": "temporal:7233", "CAPSTAN_MODEL": "openai:gpt-4o", "OPENAI_BASE_URL": "https://models.example/v1",
		"CAPSTAN_GITHUB_APP_ID": "12345", "CAPSTAN_GITHUB_APP_INSTALLATION_ID": "678",
		"HOME": "/home/capstan", "LANG": "C.UTF-8", "TMPDIR": os.TempDir(),
		"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "localhost", "SSL_CERT_FILE": "/etc/ssl/certs/ca.pem",
		"TICKETS_TOKEN": "tickets-secret-value", "WIKI_TOKEN": "wiki-secret-value", "WIKI_REGION": "eu-1",
	} {
		t.Setenv(k, v)
	}
	self, _ := os.Executable()
	data := fmt.Sprintf(`{"mcpServers": {
	  "tickets": {"command": %[1]q, "env": {%[2]q: "1", "TICKETS_TOKEN": "${TICKETS_TOKEN}"}},
	  "wiki": {"command": %[1]q, "env": {%[2]q: "1", "TOKEN": "${WIKI_TOKEN}"}, "capstan": {"inherit_env": ["WIKI_REGION", "NOT_SET_ANYWHERE"]}}}}`,
		self, environmentVar)
	cfg, err := Parse("test.json", []byte(data), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	seen := func(server string) map[string]string {
		t.Helper()
		var impl tool.Tool
		for _, tt := range p.Tools() {
			if tt.Name() == ToolName(server, "environment") {
				impl = tt
			}
		}
		res, err := impl.Execute(ctx, tool.Call{OperationID: "op-" + server, Arguments: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("%s: %v", server, err)
		}
		var doc struct {
			Structured map[string]string `json:"structured"`
		}
		if err := json.Unmarshal(res.Output, &doc); err != nil {
			t.Fatal(err)
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range doc.Structured {
				if !yield(k) {
					return
				}
			}
		})
		t.Logf("server %s sees %d variables: %s", server, len(names), strings.Join(names, " "))
		return doc.Structured
	}
	tickets, wiki := seen("tickets"), seen("wiki")
	for server, vars := range map[string]map[string]string{"tickets": tickets, "wiki": wiki} {
		for _, k := range workerSecrets {
			if _, ok := vars[k]; ok {
				t.Errorf("server %s was given the worker's %s", server, k)
			}
		}
		for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR", "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"} {
			if vars[k] != os.Getenv(k) {
				t.Errorf("server %s: %s = %q, want the worker's %q", server, k, vars[k], os.Getenv(k))
			}
		}
		other := map[string]string{"tickets": "wiki-secret-value", "wiki": "tickets-secret-value"}[server]
		for k, v := range vars {
			if strings.Contains(v, other) {
				t.Errorf("server %s holds the other server's ${VAR} value in %s", server, k)
			}
		}
		if _, ok := vars["TEMPORAL_ADDRESS"]; ok {
			t.Errorf("server %s was given TEMPORAL_ADDRESS, which neither BaseEnv nor its configuration names", server)
		}
	}
	if tickets["TICKETS_TOKEN"] != "tickets-secret-value" || wiki["TOKEN"] != "wiki-secret-value" {
		t.Errorf("own env: tickets TICKETS_TOKEN=%q, wiki TOKEN=%q: want each its own ${VAR}", tickets["TICKETS_TOKEN"], wiki["TOKEN"])
	}
	if _, ok := wiki["WIKI_TOKEN"]; ok {
		t.Error("server wiki was given WIKI_TOKEN by name; only its env's TOKEN holds the value")
	}
	if wiki["WIKI_REGION"] != "eu-1" {
		t.Errorf("server wiki: WIKI_REGION = %q, want eu-1 from capstan.inherit_env", wiki["WIKI_REGION"])
	}
	if _, ok := tickets["WIKI_REGION"]; ok {
		t.Error("server tickets was given WIKI_REGION, which only wiki's capstan.inherit_env names")
	}
	if _, ok := wiki["NOT_SET_ANYWHERE"]; ok {
		t.Error("server wiki: NOT_SET_ANYWHERE, not set in the worker, is set")
	}
}

// A server that answers initialize as capstan's own (`starter mcp serve`'s
// serverInfo.name) is refused in one sentence naming it, and its process
// is stopped; the same program under another name is connected.
func TestCapstansOwnServerIsRefused(t *testing.T) {
	self, _ := os.Executable()
	data := fmt.Sprintf(`{"mcpServers": {"tasks": {"command": %q, "env": {%q: "1", %q: %q}}}}`,
		self, environmentVar, serverNameVar, config.MCPServeName)
	cfg, err := Parse("test.json", []byte(data), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Open(ctx, cfg, nil)
	if err == nil {
		p.Close()
		t.Fatal("a server announcing itself as capstan's own was connected")
	}
	if !errors.Is(err, ErrCapstanServer) || !errors.Is(err, ErrNotConnected) || !strings.HasPrefix(err.Error(), "mcp server tasks (stdio: ") || strings.Count(err.Error(), ". ") > 0 {
		t.Errorf("error %q: want one sentence naming the server, wrapping ErrCapstanServer and ErrNotConnected (nothing was sent)", err)
	}

	data = strings.Replace(data, fmt.Sprintf("%q", config.MCPServeName), `"tasks-of-another-kind"`, 1)
	if cfg, err = Parse("test.json", []byte(data), env(nil)); err != nil {
		t.Fatal(err)
	}
	if p, err = Open(ctx, cfg, nil); err != nil {
		t.Fatalf("the same server under another name: %v", err)
	}
	p.Close()
}
