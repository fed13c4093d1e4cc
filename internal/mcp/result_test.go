package mcp

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
