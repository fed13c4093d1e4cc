package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/tool"
)

// Prefix starts the name of every MCP tool: mcp__<server>__<tool>.
const Prefix = "mcp__"

// maxName is the longest tool name the model providers take.
const maxName = 64

// invalidName matches the characters a provider refuses in a tool name.
var invalidName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// ToolName is capstan's name of tool on server: mcp__<server>__<tool>, the
// characters a provider refuses replaced by _, and a name over 64
// characters cut and given a short hash of the whole, so two long names
// stay apart.
func ToolName(server, impl string) string {
	full := Prefix + server + "__" + impl
	name := invalidName.ReplaceAllString(full, "_")
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(full))
	return name[:maxName-9] + "_" + hex.EncodeToString(sum[:4])
}

// SchemaHash is the hash of an input schema as a model is shown it: the
// first 16 hex digits of the SHA-256 of its canonical JSON (keys sorted).
func SchemaHash(doc map[string]any) string {
	b, _ := json.Marshal(doc) // a decoded JSON document encodes
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ErrVanished reports a call to a tool its server no longer lists.
var ErrVanished = errors.New("the MCP server no longer offers this tool")

// Tool is one tool of an MCP server as capstan offers it: a tool.Tool.
// Its schema is the server's, as last listed: when the server changes it,
// the tool follows (and SchemaHash says so).
type Tool struct {
	conn   *Conn
	remote string // the server's name of the tool
	name   string // capstan's
	class  capstan.Class
	lookup string // the look-up tool's remote name; "" for none

	mu     sync.Mutex
	seen   *sdk.Tool // the listing schema was compiled from
	schema *tool.Schema
	hash   string
	err    error // why the listing's schema did not compile
}

// Remote is the server's name of the tool.
func (t *Tool) Remote() string { return t.remote }

// Server is the tool's server.
func (t *Tool) Server() string { return t.conn.server.Name }

// Name is capstan's name, mcp__<server>__<tool>.
func (t *Tool) Name() string { return t.name }

// Class is the configured class, the annotations' of a trusted server,
// else unsafe.
func (t *Tool) Class() capstan.Class { return t.class }

// Lookup is the server's name of the look-up tool; "" for none.
func (t *Tool) Lookup() string { return t.lookup }

// Breaker is the key of the server's breaker, mcp/<server>.
func (t *Tool) Breaker() string { return "mcp/" + t.conn.server.Name }

// Description is the server's, with where it comes from.
func (t *Tool) Description() string {
	d := ""
	if st := t.current(); st != nil {
		d = st.Description
	}
	return strings.TrimSpace(fmt.Sprintf("%s (MCP server %s, tool %s, class %s)", d, t.Server(), t.remote, t.class))
}

// current is the tool as the server last listed it; nil when it vanished.
func (t *Tool) current() *sdk.Tool { return t.conn.Tool(t.remote) }

// compiled returns the schema of the current listing, compiling it when
// the listing changed; the error says the tool vanished or its schema does
// not compile.
func (t *Tool) compiled() (*tool.Schema, string, error) {
	cur := t.current()
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur == nil {
		return t.schema, t.hash, fmt.Errorf("%w: %s of server %s", ErrVanished, t.remote, t.Server())
	}
	if cur != t.seen {
		t.seen = cur
		doc, err := schemaDoc(cur.InputSchema)
		if err == nil {
			var s *tool.Schema
			if s, err = tool.NewSchema(doc); err == nil {
				t.schema, t.hash = s, SchemaHash(s.Doc())
			}
		}
		t.err = err
	}
	return t.schema, t.hash, t.err
}

func schemaDoc(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("the input schema is not a JSON object")
	}
	return doc, nil
}

// emptySchema stands for a tool whose schema was never read.
var emptySchema = tool.MustSchema(map[string]any{"type": "object"})

// Schema is the server's input schema as last listed.
func (t *Tool) Schema() *tool.Schema {
	s, _, _ := t.compiled()
	if s == nil {
		return emptySchema
	}
	return s
}

// SchemaHash is the hash of Schema; "" when the tool vanished or its
// schema does not compile.
func (t *Tool) SchemaHash() string {
	_, h, err := t.compiled()
	if err != nil {
		return ""
	}
	return h
}

// Identify validates args against the server's schema. The effect is the
// canonical arguments: an MCP tool has no business key.
func (t *Tool) Identify(args json.RawMessage) (tool.Identity, error) {
	s, _, err := t.compiled()
	if err != nil {
		return tool.Identity{}, fmt.Errorf("%w: %w", tool.ErrRefused, err)
	}
	if err := s.Validate(args); err != nil {
		return tool.Identity{}, err
	}
	var v any
	_ = json.Unmarshal(args, &v) // Validate parsed it
	canon, _ := json.Marshal(v)
	return tool.Identity{Effect: canon}, nil
}

// Summary is "<server>/<tool> <arguments>", cut short.
func (t *Tool) Summary(args json.RawMessage) string {
	s := fmt.Sprintf("%s/%s %s", t.Server(), t.remote, strings.Join(strings.Fields(string(args)), " "))
	if r := []rune(s); len(r) > 120 {
		s = string(r[:120]) + "…"
	}
	return s
}

// Execute calls the tool once, its operation id in _meta. Its error's
// message is at most MaxErrorText bytes and a marker. A result with
// isError is a refusal the model reads (failed); JSON-RPC -32601 and
// -32602 are failed; no connection is not_sent; every other error —
// another JSON-RPC error, a timeout, a dropped connection, a crashed
// process — came after the request may have been written, and is unknown.
func (t *Tool) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	res, err := t.conn.Call(ctx, t.remote, call.Arguments, call.OperationID)
	if err != nil {
		return tool.Result{}, bound(classify(err))
	}
	out := resultOutput(res)
	if res.IsError {
		return tool.Result{}, tool.WithVerdict(bound(fmt.Errorf("%s/%s answered an error: %s", t.Server(), t.remote, textOf(res))), tool.VerdictFailed)
	}
	return tool.Result{Output: out, ExternalID: externalID(res)}, nil
}

// classify marks a call's error with its verdict.
func classify(err error) error {
	var wire *jsonrpc.Error
	switch {
	case errors.Is(err, ErrNotConnected):
		return tool.WithVerdict(err, tool.VerdictNotSent)
	case errors.As(err, &wire) && (wire.Code == jsonrpc.CodeMethodNotFound || wire.Code == jsonrpc.CodeInvalidParams):
		return tool.WithVerdict(err, tool.VerdictFailed)
	case errors.Is(err, context.Canceled):
		return err // cancelled: Classify says so
	case tool.Classify(err) == tool.VerdictNotSent:
		return err // the dial, DNS or TLS failed (HTTP): nothing was written
	}
	return tool.WithVerdict(err, tool.VerdictUnknown)
}

func textOf(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// externalID is the structured content's "external_id", if it is a string.
func externalID(res *sdk.CallToolResult) string {
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		return ""
	}
	id, _ := m["external_id"].(string)
	return id
}
