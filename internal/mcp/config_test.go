package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestParseReadsTheConventionAndCapstansKey(t *testing.T) {
	data := `{"mcpServers": {
	  "tickets": {"command": "srv", "args": ["--token", "${TOK}"], "env": {"API_KEY": "${KEY}", "PLAIN": "x"},
	    "capstan": {"trusted": true, "call_timeout": "5s", "connect_timeout": "3s",
	      "breaker": {"failures": 2, "open": "10s"},
	      "tools": {"create_ticket": {"class": "unsafe", "lookup": "find_ticket"}, "search": {"class": "read_only"}}}},
	  "remote": {"type": "http", "url": "https://mcp.example/${PATH_PART}", "headers": {"Authorization": "Bearer ${KEY}"}},
	  "off": {"command": "nothing", "disabled": true}
	}}`
	c, err := Parse("mcp.json", []byte(data), env(map[string]string{"TOK": "t0k", "KEY": "s3cret", "PATH_PART": "mcp"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); strings.Join(got, ",") != "remote,tickets" {
		t.Fatalf("servers %v, want remote and tickets (off is disabled)", got)
	}
	s := c.Servers["tickets"]
	if !s.Stdio() || !s.Capstan.Trusted || s.Capstan.CallTimeout != 5*time.Second || s.Capstan.ConnectTimeout != 3*time.Second {
		t.Errorf("tickets settings: %+v", s.Capstan)
	}
	if b := s.Capstan.Breaker; b == nil || b.ConsecutiveFailures != 2 || b.OpenFor != 10*time.Second || b.MinCalls == 0 {
		t.Errorf("breaker: %+v", b)
	}
	if ts := s.Capstan.Tools["create_ticket"]; ts.Class != capstan.ClassUnsafe || ts.Lookup != "find_ticket" {
		t.Errorf("create_ticket: %+v", ts)
	}
	if got := strings.Join(s.expanded.args, " "); got != "--token t0k" {
		t.Errorf("expanded args %q", got)
	}
	if got := strings.Join(s.expanded.env, " "); got != "API_KEY=s3cret PLAIN=x" {
		t.Errorf("expanded env %q", got)
	}
	r := c.Servers["remote"]
	if r.expanded.url != "https://mcp.example/mcp" || r.expanded.headers["Authorization"] != "Bearer s3cret" {
		t.Errorf("remote expanded: %q %v", r.expanded.url, r.expanded.headers)
	}
	// What is written, printed or encoded of a server never holds a value.
	enc, _ := json.Marshal(c)
	for _, shown := range []string{string(enc), fmt.Sprint(s), fmt.Sprint(r), fmt.Sprintf("%+v", *r)} {
		if strings.Contains(shown, "s3cret") || strings.Contains(shown, "t0k") {
			t.Errorf("a secret shows: %s", shown)
		}
	}
}

func TestParseRefusesWithOneSentenceNamingServerAndField(t *testing.T) {
	cases := []struct{ name, data, want string }{
		{"double underscore", `{"mcpServers": {"a__b": {"command": "x"}}}`, `server "a__b": the name contains "__"`},
		{"bad name", `{"mcpServers": {"a.b": {"command": "x"}}}`, `server "a.b": the name may hold only`},
		{"both", `{"mcpServers": {"s": {"command": "x", "url": "http://h"}}}`, `server "s": "command" and "url" are both set`},
		{"neither", `{"mcpServers": {"s": {}}}`, `server "s": neither "command"`},
		{"unset var", `{"mcpServers": {"s": {"command": "x", "env": {"K": "${NOPE}"}}}}`, `server "s": env.K: ${NOPE} is not set in the worker's environment`},
		{"bad class", `{"mcpServers": {"s": {"command": "x", "capstan": {"tools": {"t": {"class": "safe"}}}}}}`, `server "s": capstan.tools.t.class: "safe" is not read_only, idempotent or unsafe`},
		{"conditional", `{"mcpServers": {"s": {"command": "x", "capstan": {"tools": {"t": {"class": "conditional"}}}}}}`, `server "s": capstan.tools.t.class: conditional`},
		{"lookup of read", `{"mcpServers": {"s": {"command": "x", "capstan": {"tools": {"t": {"class": "read_only", "lookup": "f"}}}}}}`, `server "s": capstan.tools.t.lookup: only an unsafe tool`},
		{"bad timeout", `{"mcpServers": {"s": {"command": "x", "capstan": {"call_timeout": "soon"}}}}`, `server "s": capstan.call_timeout: "soon"`},
		{"bad breaker", `{"mcpServers": {"s": {"command": "x", "capstan": {"breaker": {"failure_ratio": 2}}}}}`, `server "s": capstan.breaker: failure ratio`},
		{"unknown key", `{"mcpServers": {"s": {"command": "x", "capstan": {"trustme": true}}}}`, `server "s": json: unknown field "trustme"`},
		{"sse", `{"mcpServers": {"s": {"type": "sse", "url": "http://h"}}}`, `server "s": type: "sse"`},
		{"bad url", `{"mcpServers": {"s": {"url": "ftp://h"}}}`, `server "s": url: is not an http or https URL`},
		{"bad inherit_env", `{"mcpServers": {"s": {"command": "x", "capstan": {"inherit_env": ["AWS PROFILE"]}}}}`, `server "s": capstan.inherit_env[0]: "AWS PROFILE" is not a variable name`},
		{"inherit_env of url", `{"mcpServers": {"s": {"url": "http://h", "capstan": {"inherit_env": ["AWS_PROFILE"]}}}}`, `server "s": "capstan.inherit_env" is set for a "url" server`},
		{"no servers", `{}`, `there is no "mcpServers" object`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("mcp.json", []byte(tc.data), env(nil))
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("not one sentence: %q", err)
			}
		})
	}
}

func TestToolNames(t *testing.T) {
	if got := ToolName("tickets", "create_ticket"); got != "mcp__tickets__create_ticket" {
		t.Errorf("got %q", got)
	}
	if got := ToolName("t", "a.b/c d"); got != "mcp__t__a_b_c_d" {
		t.Errorf("got %q", got)
	}
	long1 := ToolName("server", strings.Repeat("x", 70)+"1")
	long2 := ToolName("server", strings.Repeat("x", 70)+"2")
	if len(long1) != 64 || len(long2) != 64 || long1 == long2 {
		t.Errorf("long names %q (%d) and %q (%d): want 64 characters each, different", long1, len(long1), long2, len(long2))
	}
	if ToolName("server", strings.Repeat("x", 70)+"1") != long1 {
		t.Error("a cut name is not stable")
	}
}
