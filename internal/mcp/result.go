package mcp

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// resultOutput is the JSON document the model is given: the text of the
// result, the structured content when there is one, and a description of
// every other content — images, audio and resources are described (type,
// MIME type, size, URI), never inlined.
func resultOutput(res *sdk.CallToolResult) json.RawMessage {
	doc := map[string]any{}
	if txt := textOf(res); txt != "" {
		doc["text"] = txt
	}
	if res.StructuredContent != nil {
		doc["structured"] = res.StructuredContent
	}
	var other []string
	for _, c := range res.Content {
		if d := describe(c); d != "" {
			other = append(other, d)
		}
	}
	if len(other) > 0 {
		doc["other_content"] = other
	}
	b, _ := json.Marshal(doc)
	return b
}

// describe says what a content other than text is, for the model; "" for
// text.
func describe(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return ""
	case *sdk.ImageContent:
		return fmt.Sprintf("an image (%s, %d bytes), not shown", c.MIMEType, len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("audio (%s, %d bytes), not shown", c.MIMEType, len(c.Data))
	case *sdk.ResourceLink:
		return fmt.Sprintf("a link to the resource %s (%s)", c.URI, sized(c.MIMEType, c.Size))
	case *sdk.EmbeddedResource:
		if r := c.Resource; r != nil {
			n := int64(len(r.Text) + len(r.Blob))
			return fmt.Sprintf("the resource %s (%s), not shown", r.URI, sized(r.MIMEType, &n))
		}
		return "an empty embedded resource"
	}
	return fmt.Sprintf("content of type %T, not shown", c)
}

func sized(mime string, size *int64) string {
	if mime == "" {
		mime = "type not given"
	}
	if size == nil {
		return mime + ", size not given"
	}
	return fmt.Sprintf("%s, %d bytes", mime, *size)
}

// Cap bounds output — a result document of Execute — to about limit bytes
// for the model: unchanged when it fits; otherwise its structured content
// is left out when that alone is over a quarter of limit, its text is cut
// (on a character boundary) so the document fits, and a "truncated" note
// gives the whole result's size, the cap and ref, the reference under
// which the caller kept the whole result ("" when it could not be kept).
// The external id is the caller's to keep: Cap sees only the document.
func Cap(output []byte, limit int, ref string) []byte {
	if limit <= 0 || len(output) <= limit {
		return output
	}
	var doc map[string]any
	if err := json.Unmarshal(output, &doc); err != nil || doc == nil {
		doc = map[string]any{"text": string(output)}
	}
	text, _ := doc["text"].(string)
	var left string
	if st, ok := doc["structured"]; ok {
		if b, _ := json.Marshal(st); len(b) > limit/4 {
			delete(doc, "structured")
			left = fmt.Sprintf(" and leaves out its structured content (%d bytes)", len(b))
		}
	}
	kept := "it is not kept: the ledger could not store it"
	if ref != "" {
		kept = "the whole result is kept in capstan's ledger as item " + ref
	}
	shown := len(text)
	var out []byte
	for range 4 { // shrink the text until the document fits
		doc["text"] = text[:shown]
		doc["truncated"] = map[string]any{"bytes": len(output), "cap": limit, "item": ref,
			"note": fmt.Sprintf("the result was %d bytes, over capstan's cap of %d: this shows the first %d bytes of its text%s; %s",
				len(output), limit, shown, left, kept)}
		out, _ = json.Marshal(doc)
		if len(out) <= limit || shown == 0 {
			break
		}
		shown = cut(text, max(0, shown-(len(out)-limit)-64))
	}
	return out
}

// MaxErrorText bounds the text of an MCP error — a server's isError
// answer, a JSON-RPC error, a look-up's — wherever it becomes an error
// message, and so an operation's reason, the ledger's error column or a
// refusal the model reads: a hostile or broken server cannot fill them.
const MaxErrorText = 4 << 10

// boundText is text cut to MaxErrorText bytes (on a character boundary)
// and marked with what was left out, never cut silently.
func boundText(text string) string {
	if len(text) <= MaxErrorText {
		return text
	}
	n := cut(text, MaxErrorText)
	return fmt.Sprintf("%s… %d more bytes", text[:n], len(text)-n)
}

// boundedError is err whose message is bounded by boundText; errors.Is
// and errors.As still see err.
type boundedError struct{ err error }

func (e boundedError) Error() string { return boundText(e.err.Error()) }
func (e boundedError) Unwrap() error { return e.err }

// bound wraps err so its message is at most MaxErrorText bytes and a
// marker; an err already short enough is returned as it is.
func bound(err error) error {
	if err == nil || len(err.Error()) <= MaxErrorText {
		return err
	}
	return boundedError{err}
}

// cut is the largest n <= at that ends text[:n] on a character boundary.
func cut(text string, at int) int {
	if at >= len(text) {
		return len(text)
	}
	for at > 0 && !utf8.RuneStart(text[at]) {
		at--
	}
	return at
}
