package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
	"github.com/capstanhq/capstan/tool"
)

func TestCapCutsTheTextAndNamesTheItem(t *testing.T) {
	small := []byte(`{"text":"short"}`)
	if got := Cap(small, 100, "sha256:x"); string(got) != string(small) {
		t.Errorf("a result under the cap changed: %s", got)
	}
	text := strings.Repeat("é and more ", 2000) // multi-byte, escaped by nobody
	whole, _ := json.Marshal(map[string]any{"text": text, "structured": map[string]any{"blob": strings.Repeat("x", 500)}})
	out := Cap(whole, 1000, "sha256:abc")
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	got, _ := doc["text"].(string)
	note, _ := doc["truncated"].(map[string]any)["note"].(string)
	switch {
	case len(out) > 1000:
		t.Errorf("capped to %d bytes, want at most 1000", len(out))
	case !utf8.ValidString(got) || !strings.HasPrefix(text, got) || len(got) < 200:
		t.Errorf("text %q, want a valid prefix of the text", got)
	case doc["structured"] != nil || !strings.Contains(note, "leaves out its structured content"):
		t.Errorf("structured %v, note %q: want it left out, and said", doc["structured"], note)
	case !strings.Contains(note, "sha256:abc") || !strings.Contains(note, "over capstan's cap of 1000"):
		t.Errorf("note %q", note)
	}
	if out := Cap(whole, 1000, ""); !strings.Contains(string(out), "it is not kept") {
		t.Errorf("without a reference: %s", out)
	}
}

func TestOtherContentIsDescribedNotInlined(t *testing.T) {
	size := int64(2048)
	res := &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.TextContent{Text: "hello"},
		&sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 300)},
		&sdk.ResourceLink{URI: "file:///report.pdf", MIMEType: "application/pdf", Size: &size},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://notes", MIMEType: "text/plain", Text: strings.Repeat("n", 50)}},
	}}
	out := string(resultOutput(res))
	for _, want := range []string{`"text":"hello"`, "an image (image/png, 300 bytes), not shown",
		"a link to the resource file:///report.pdf (application/pdf, 2048 bytes)", "the resource mem://notes (text/plain, 50 bytes), not shown"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: want %q", out, want)
		}
	}
	if strings.Contains(out, strings.Repeat("n", 50)) {
		t.Errorf("%s: the embedded resource was inlined", out)
	}
}

// A server's error text — an isError answer, a JSON-RPC error, a look-up's
// error answer — becomes an error message of at most MaxErrorText bytes
// and a marker saying how many more there were, never cut silently; the
// verdict is kept.
func TestErrorTextIsBounded(t *testing.T) {
	s, store, _ := httpServer(t, "5s")
	_, ts := openTools(t, s)
	create := ts["mcp__sb__create_ticket"]
	marker := regexp.MustCompile(`… (\d+) more bytes$`)
	check := func(what string, err error, whole int) {
		t.Helper()
		msg := err.Error()
		m := marker.FindStringSubmatch(msg)
		if m == nil {
			t.Fatalf("%s: %d bytes ending %q: want a '… N more bytes' marker", what, len(msg), msg[max(0, len(msg)-60):])
		}
		kept := len(msg) - len(m[0])
		if kept > MaxErrorText {
			t.Errorf("%s: %d bytes kept, want at most %d", what, kept, MaxErrorText)
		}
		if more, _ := strconv.Atoi(m[1]); kept+more < whole || kept+more > whole+200 {
			t.Errorf("%s: %d kept + %d more, want the whole message's ~%d bytes", what, kept, more, whole)
		}
		if strings.Contains(msg, mcpserver.BigTail) {
			t.Errorf("%s: the end of the server's text is still there", what)
		}
		if !utf8.ValidString(msg) {
			t.Errorf("%s: cut inside a character", what)
		}
	}
	for _, tc := range []struct {
		fault   string
		verdict tool.Verdict
	}{{mcpserver.FaultBigError, tool.VerdictFailed}, {mcpserver.FaultBigInvalid, tool.VerdictFailed}} {
		_ = store.Fault("create_ticket", tc.fault)
		_, err := create.Execute(context.Background(), tool.Call{OperationID: "op-" + tc.fault, Arguments: json.RawMessage(`{"title":"x"}`)})
		if err == nil {
			t.Fatalf("%s: no error", tc.fault)
		}
		check(tc.fault, err, mcpserver.BigSize)
		if got := tool.Classify(err); got != tc.verdict {
			t.Errorf("%s: verdict %s, want %s", tc.fault, got, tc.verdict)
		}
	}
	var wire *jsonrpc.Error
	_ = store.Fault("create_ticket", mcpserver.FaultBigInvalid)
	if _, err := create.Execute(context.Background(), tool.Call{OperationID: "op-wire", Arguments: json.RawMessage(`{"title":"x"}`)}); !errors.As(err, &wire) {
		t.Errorf("the bounded error %T no longer unwraps to the JSON-RPC error", err)
	}

	_ = store.Fault("find_ticket", mcpserver.FaultBigError)
	e, err := create.(tool.Finder).Effect(tool.Sent{Call: tool.Call{OperationID: "op-look"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Find(context.Background())
	if err == nil {
		t.Fatal("look-up answering a big error: no error")
	}
	check("look-up", err, mcpserver.BigSize)

	if got := boundText("short"); got != "short" {
		t.Errorf("a short text became %q", got)
	}
}
