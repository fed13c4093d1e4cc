package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/tool"
)

// An MCP server capstan did not write — the reference server
// @modelcontextprotocol/server-everything, over stdio — listed, classed
// and called through the same tools: its arguments checked against its
// own schemas, its text and structured content given to the model, its
// image described and not inlined. Under CI=true a missing server fails it
// (.ci/run installs the pinned one).
func TestServerCapstanDidNotWrite(t *testing.T) {
	bin := testenv.EverythingServer(t) // skipped without it, failed under CI=true
	cfg, err := Parse("everything.json", []byte(fmt.Sprintf(`{"mcpServers": {"everything": {"command": %q, "args": ["stdio"],
	  "capstan": {"trusted": true, "connect_timeout": "60s", "tools": {"get-sum": {"class": "idempotent"}}}}}}`, bin)), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	byName := map[string]tool.Tool{}
	for _, impl := range p.Tools() {
		byName[impl.Name()] = impl
	}
	echo, sum, image := byName["mcp__everything__echo"], byName["mcp__everything__get-sum"], byName["mcp__everything__get-tiny-image"]
	if echo == nil || sum == nil || image == nil {
		t.Fatalf("tools %v: want echo, get-sum and get-tiny-image", p.Tools())
	}
	if echo.Class() != capstan.ClassReadOnly || sum.Class() != capstan.ClassIdempotent {
		t.Errorf("classes: echo %s (the trusted server's readOnlyHint), get-sum %s (configured)", echo.Class(), sum.Class())
	}
	if _, err := echo.Identify(json.RawMessage(`{"message": 1}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("echo with a number: %v, want its own schema to refuse it", err)
	}
	call := func(impl tool.Tool, args string) string {
		t.Helper()
		if _, err := impl.Identify(json.RawMessage(args)); err != nil {
			t.Fatalf("%s %s: %v", impl.Name(), args, err)
		}
		res, err := impl.Execute(ctx, tool.Call{OperationID: "op-" + impl.Name(), Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("%s: %v", impl.Name(), err)
		}
		return string(res.Output)
	}
	if out := call(echo, `{"message": "hello capstan"}`); !strings.Contains(out, "hello capstan") {
		t.Errorf("echo answered %s", out)
	}
	if out := call(sum, `{"a": 2, "b": 3}`); !strings.Contains(out, "5") {
		t.Errorf("get-sum answered %s", out)
	}
	if out := call(image, `{}`); !strings.Contains(out, "an image (image/png") || len(out) > 1000 {
		t.Errorf("get-tiny-image answered %s: want the image described, not inlined", out)
	}
}
