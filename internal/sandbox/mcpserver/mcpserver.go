// Package mcpserver is the sandbox's MCP server, written with the official
// Go SDK: a small ticket system whose tools and faults the tests script
// (docs/design.md §5.10). It is served over stdio by the sandbox-mcp command
// (internal/sandbox/cmd/sandbox-mcp) and over streamable HTTP by Handler
// (StartHTTP for tests).
//
// Its state — the tickets made (the effects, counted), every call with the
// operation id its _meta carried, and the faults queued for the next calls —
// lives in a Store: in memory, or in a JSON file that outlives the process,
// so a stdio server killed mid-call and started again still knows what it
// did, and a test in another process reads and scripts it.
//
// Tools:
//   - create_ticket {title}: makes a ticket (an effect); unsafe, with no
//     deduplication — a repeat makes another.
//   - upsert_ticket {key, title}: makes the ticket of key once per operation
//     id (_meta io.capstan/operation_id): a repeat with the same operation id
//     answers the ticket made, no new effect; annotated idempotent.
//   - find_ticket {operation_id}: the look-up: structuredContent
//     {"status":"found"|"absent"|"unknown","external_id":…}; read-only.
//   - search_tickets {query}: lists the tickets' titles; read-only.
//
// Faults, queued per tool and taken one per call: "drop" (act, then never
// answer until cancelled or the server stops), "hang" (the same, acting on
// nothing), "crash" (act, then the process exits: stdio only), "error"
// (answer isError: true, act on nothing), "unknown" (find_ticket answers
// status unknown), "invalid" (answer JSON-RPC -32602), "slow" (report
// progress on the call's progress token every SlowEvery for SlowFor, then
// act and answer), "big" (act, and answer a text of BigSize bytes ending
// with BigTail).
//
// The server records every call's progress token, and every
// notifications/cancelled it receives (State.Cancellations).
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MetaOperationID is the _meta key capstan's calls carry their operation id
// under.
const MetaOperationID = "io.capstan/operation_id"

// Fault names.
const (
	FaultDrop    = "drop"
	FaultHang    = "hang"
	FaultCrash   = "crash"
	FaultError   = "error"
	FaultUnknown = "unknown"
	FaultInvalid = "invalid"
	FaultSlow    = "slow"
	FaultBig     = "big"
	// FaultBigError and FaultBigInvalid are error and invalid with a text
	// of BigSize bytes.
	FaultBigError   = "big_error"
	FaultBigInvalid = "big_invalid"
)

// The shape of the faults slow and big.
const (
	SlowFor   = 4 * time.Second
	SlowEvery = 200 * time.Millisecond
	BigSize   = 200 << 10
	BigTail   = "END-OF-THE-BIG-ANSWER"
)

// Options shape a server.
type Options struct {
	// SchemaVersion 2 gives create_ticket another input schema (a required
	// "summary" instead of "title"): a schema changed between two tasks.
	SchemaVersion int
	// Stop, closed, ends every call still hanging or holding back its
	// answer (faults hang and drop), as the server's host going away
	// would. Without it such a call ends only when its client cancels it,
	// and notifications/cancelled is best-effort: one lost leaves the call
	// hanging, and the session (and an HTTP server closing it) waiting on
	// it for ever.
	Stop <-chan struct{}
}

// New returns the sandbox MCP server over store.
func New(store *Store, o Options) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "capstan-sandbox-mcp", Version: "1"}, nil)
	h := &handlers{store: store, stop: o.Stop}
	s.AddReceivingMiddleware(recordCancellations(store))
	yes, no := true, false
	createSchema := map[string]any{"type": "object", "required": []any{"title"},
		"properties": map[string]any{"title": map[string]any{"type": "string", "minLength": 1}}, "additionalProperties": false}
	if o.SchemaVersion == 2 {
		createSchema = map[string]any{"type": "object", "required": []any{"summary"},
			"properties": map[string]any{"summary": map[string]any{"type": "string", "minLength": 1}}, "additionalProperties": false}
	}
	s.AddTool(&sdk.Tool{Name: "create_ticket", Description: "Create a ticket.", InputSchema: createSchema,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no}}, h.create)
	s.AddTool(&sdk.Tool{Name: "upsert_ticket", Description: "Create the ticket of a key, once per operation id.",
		InputSchema: map[string]any{"type": "object", "required": []any{"key", "title"}, "properties": map[string]any{
			"key": map[string]any{"type": "string"}, "title": map[string]any{"type": "string"}}},
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes}}, h.upsert)
	s.AddTool(&sdk.Tool{Name: "find_ticket", Description: "Find the ticket an operation made.",
		InputSchema: map[string]any{"type": "object", "required": []any{"operation_id"}, "properties": map[string]any{
			"operation_id": map[string]any{"type": "string"}}},
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, h.find)
	s.AddTool(&sdk.Tool{Name: "search_tickets", Description: "List the tickets' titles.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}},
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, h.search)
	return s
}

// Handler serves New(store, o) over streamable HTTP.
func Handler(store *Store, o Options) http.Handler {
	s := New(store, o)
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
}

// HTTPServer is the sandbox server over streamable HTTP on a loopback
// port, for tests.
type HTTPServer struct {
	*httptest.Server
	stop     chan struct{}
	stopOnce sync.Once
}

// StartHTTP starts New(store, o) over streamable HTTP on a loopback port;
// o.Stop is replaced by the server's own, which Close closes.
func StartHTTP(store *Store, o Options) *HTTPServer {
	s := &HTTPServer{stop: make(chan struct{})}
	o.Stop = s.stop
	s.Server = httptest.NewServer(Handler(store, o))
	return s
}

// Stop ends the calls still hanging or holding back their answer: each
// answers an error.
func (s *HTTPServer) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

// Close stops the server (Stop), drops the clients' connections and
// closes it; it returns once every request has ended.
func (s *HTTPServer) Close() {
	s.Stop()
	s.Server.CloseClientConnections()
	s.Server.Close()
}

// ServeStdio serves New(store, o) on standard input and output until the
// client goes.
func ServeStdio(ctx context.Context, store *Store, o Options) error {
	return New(store, o).Run(ctx, &sdk.StdioTransport{})
}

type handlers struct {
	store *Store
	stop  <-chan struct{}
}

// errStopped ends a call still held when the server stops.
var errStopped = errors.New("the sandbox MCP server stopped")

// hold never answers: it returns when ctx ends (the client cancelled) or
// the server stops.
func (h *handlers) hold(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stop:
		return errStopped
	}
}

// recordCancellations records every notifications/cancelled the server
// receives.
func recordCancellations(store *Store) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if p, ok := req.GetParams().(*sdk.CancelledParams); ok && method == "notifications/cancelled" {
				_ = store.Cancelled(fmt.Sprint(p.RequestID), p.Reason)
			}
			return next(ctx, method, req)
		}
	}
}

func progressToken(req *sdk.CallToolRequest) string {
	if t := req.Params.GetProgressToken(); t != nil {
		return fmt.Sprint(t)
	}
	return ""
}

func operationID(req *sdk.CallToolRequest) string {
	op, _ := req.Params.Meta[MetaOperationID].(string)
	return op
}

func text(s string) []sdk.Content { return []sdk.Content{&sdk.TextContent{Text: s}} }

// begin records the call and takes its fault; a fault that answers before
// acting answers here (done).
func (h *handlers) begin(ctx context.Context, req *sdk.CallToolRequest) (fault string, res *sdk.CallToolResult, err error, done bool) {
	fault, ferr := h.store.Call(req.Params.Name, operationID(req), progressToken(req), req.Params.Arguments)
	if ferr != nil {
		return "", nil, ferr, true
	}
	switch fault {
	case FaultHang:
		return fault, nil, h.hold(ctx), true
	case FaultError:
		return fault, &sdk.CallToolResult{IsError: true, Content: text("the ticket system refused: scripted error")}, nil, true
	case FaultInvalid:
		return fault, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "scripted invalid params"}, true
	case FaultBigError:
		return fault, &sdk.CallToolResult{IsError: true, Content: text("the ticket system refused: " + bigText())}, nil, true
	case FaultBigInvalid:
		return fault, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + bigText()}, true
	case FaultSlow:
		if err := slowly(ctx, req); err != nil {
			return fault, nil, err, true
		}
	}
	return fault, nil, nil, false
}

// bigText is about BigSize bytes of text ending with BigTail.
func bigText() string {
	return strings.Repeat("the ticket system says a great deal. ", BigSize/37) + BigTail
}

// slowly reports progress on the call's token every SlowEvery for
// SlowFor (without a token it just takes that long).
func slowly(ctx context.Context, req *sdk.CallToolRequest) error {
	token := req.Params.GetProgressToken()
	tick := time.NewTicker(SlowEvery)
	defer tick.Stop()
	end := time.After(SlowFor)
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			return nil
		case <-tick.C:
		}
		if token != nil {
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token,
				Progress: float64(n), Message: "still working"})
		}
	}
}

// after applies a fault that strikes once the tool acted.
func (h *handlers) after(ctx context.Context, fault string, res *sdk.CallToolResult) (*sdk.CallToolResult, error) {
	switch fault {
	case FaultBig:
		res.Content = append(res.Content, &sdk.TextContent{Text: bigText()})
	case FaultDrop:
		return nil, h.hold(ctx)
	case FaultCrash:
		os.Exit(3)
	}
	return res, nil
}

func (h *handlers) create(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	fault, res, err, done := h.begin(ctx, req)
	if done {
		return res, err
	}
	var args map[string]string
	_ = json.Unmarshal(req.Params.Arguments, &args)
	title := args["title"] + args["summary"]
	t, err := h.store.Make("create_ticket", operationID(req), "", title)
	if err != nil {
		return nil, err
	}
	return h.after(ctx, fault, ticketResult(t))
}

func (h *handlers) upsert(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	fault, res, err, done := h.begin(ctx, req)
	if done {
		return res, err
	}
	var args map[string]string
	_ = json.Unmarshal(req.Params.Arguments, &args)
	t, err := h.store.Make("upsert_ticket", operationID(req), args["key"], args["title"])
	if err != nil {
		return nil, err
	}
	return h.after(ctx, fault, ticketResult(t))
}

func ticketResult(t Ticket) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: text(fmt.Sprintf("ticket %s: %s", t.ID, t.Title)),
		StructuredContent: map[string]any{"external_id": t.ID, "title": t.Title}}
}

func (h *handlers) find(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	fault, res, err, done := h.begin(ctx, req)
	if done {
		return res, err
	}
	var args map[string]string
	_ = json.Unmarshal(req.Params.Arguments, &args)
	st, err := h.store.Load()
	if err != nil {
		return nil, err
	}
	out := map[string]any{"status": "absent"}
	if fault == FaultUnknown {
		out["status"] = "unknown"
	} else if t, ok := st.byOperation(args["operation_id"]); ok {
		out = map[string]any{"status": "found", "external_id": t.ID}
	}
	b, _ := json.Marshal(out)
	return h.after(ctx, fault, &sdk.CallToolResult{Content: text(string(b)), StructuredContent: out})
}

func (h *handlers) search(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	fault, res, err, done := h.begin(ctx, req)
	if done {
		return res, err
	}
	var args map[string]string
	_ = json.Unmarshal(req.Params.Arguments, &args)
	st, err := h.store.Load()
	if err != nil {
		return nil, err
	}
	var titles []string
	for _, t := range st.Tickets {
		if strings.Contains(t.Title, args["query"]) {
			titles = append(titles, t.ID+": "+t.Title)
		}
	}
	sort.Strings(titles)
	return h.after(ctx, fault, &sdk.CallToolResult{Content: text(strings.Join(titles, "\n"))})
}
