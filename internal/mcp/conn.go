package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/config"
	captrace "github.com/capstanhq/capstan/internal/trace"
)

// restartPolicy spaces the restarts of a stdio server that died: full
// jitter, doubling from half a second to 30 s.
var restartPolicy = backoff.Policy{Base: 500 * time.Millisecond, Cap: 30 * time.Second}

// ErrNotConnected reports a call made while the server could not be
// reached: nothing was sent.
var ErrNotConnected = errors.New("the MCP server is not connected")

// ErrCapstanServer refuses a server that answers initialize as capstan's
// own (`starter mcp serve`, serverInfo.name config.MCPServeName): through
// it a task could start tasks or approve its own operations. Nothing was
// sent to it, so it is also ErrNotConnected: a call refused so (a
// server that answers so only after a restart) is not_sent.
var ErrCapstanServer error = refusedServer(fmt.Sprintf("it answers as capstan's own MCP server (serverInfo.name %q, starter mcp serve), through which a task could start tasks or approve its own operations; remove it from the file", config.MCPServeName))

// refusedServer is the error of a server capstan will not use; it is
// ErrNotConnected too.
type refusedServer string

func (e refusedServer) Error() string { return string(e) }

// Is reports ErrNotConnected as well as the error itself.
func (e refusedServer) Is(target error) bool { return target == ErrNotConnected }

// Conn is the worker's connection to one server: it connects (starting a
// stdio server's process), keeps the server's tool list, and, for a stdio
// server, restarts the process with backoff when it dies. Safe for
// concurrent use.
type Conn struct {
	server *Server
	logger *slog.Logger
	client *sdk.Client

	mu       sync.Mutex
	session  *sdk.ClientSession
	tools    map[string]*sdk.Tool
	restarts int
	closed   bool
	// changed is closed and replaced whenever the tool list changes, so a
	// watcher can wait for it.
	changed chan struct{}
	done    chan struct{}

	// progress holds, by progress token, what a progress notification of
	// a call in flight does: start its idle timer again.
	progress sync.Map // string → func()
	tokens   atomic.Uint64
}

// Dial connects to s and lists its tools. A stdio server that dies later
// is restarted in the background; an HTTP server is reached again on the
// next call after its session ended.
func Dial(ctx context.Context, s *Server, logger *slog.Logger) (*Conn, error) {
	if logger == nil {
		logger = slog.Default()
	}
	c := &Conn{server: s, logger: logger.With("mcp_server", s.Name), changed: make(chan struct{}), done: make(chan struct{})}
	c.client = sdk.NewClient(&sdk.Implementation{Name: "capstan", Version: "1"}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(ctx context.Context, _ *sdk.ToolListChangedRequest) {
			go c.refresh(context.WithoutCancel(ctx))
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			if f, ok := c.progress.Load(fmt.Sprint(req.Params.ProgressToken)); ok {
				f.(func())()
			}
		},
	})
	if _, err := c.connect(ctx); err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", s, err)
	}
	return c, nil
}

// Server is the server this connection reaches.
func (c *Conn) Server() *Server { return c.server }

// transport builds a transport of the server, from its expanded values.
func (c *Conn) transport() sdk.Transport {
	e := c.server.expanded
	if c.server.Stdio() {
		cmd := exec.Command(e.command, e.args...)
		// Never the worker's environment: only what Parse chose
		// (BaseEnv, capstan.inherit_env, the server's "env").
		cmd.Env = append([]string{}, e.env...) // never nil, which would mean all of it
		cmd.Dir = e.cwd
		cmd.Stderr = &logWriter{logger: c.logger}
		return &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	return &sdk.StreamableClientTransport{
		Endpoint: e.url,
		// No transparent retries: a request whose answer is lost is
		// capstan's to judge.
		MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerTransport{headers: e.headers, base: http.DefaultTransport}},
	}
}

// connect opens a session (unless one is open) and lists the tools.
func (c *Conn) connect(ctx context.Context) (*sdk.ClientSession, error) {
	c.mu.Lock()
	if c.session != nil {
		s := c.session
		c.mu.Unlock()
		return s, nil
	}
	if c.closed {
		c.mu.Unlock()
		return nil, ErrNotConnected
	}
	c.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, c.server.Capstan.ConnectTimeout)
	defer cancel()
	session, err := c.client.Connect(cctx, c.transport(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: connect: %v", ErrNotConnected, err)
	}
	if init := session.InitializeResult(); init != nil && init.ServerInfo != nil && init.ServerInfo.Name == config.MCPServeName {
		_ = session.Close()
		return nil, ErrCapstanServer
	}
	list, err := listTools(cctx, session)
	if err != nil {
		_ = session.Close()
		return nil, fmt.Errorf("%w: list tools: %v", ErrNotConnected, err)
	}
	c.mu.Lock()
	if c.session != nil || c.closed { // another caller connected first, or Close
		s, closed := c.session, c.closed
		c.mu.Unlock()
		_ = session.Close()
		if closed {
			return nil, ErrNotConnected
		}
		return s, nil
	}
	c.session = session
	c.setTools(list)
	c.mu.Unlock()
	go c.watch(session)
	return session, nil
}

func listTools(ctx context.Context, session *sdk.ClientSession) (map[string]*sdk.Tool, error) {
	tools := map[string]*sdk.Tool{}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		tools[t.Name] = t
	}
	return tools, nil
}

// setTools replaces the tool list; c.mu is held.
func (c *Conn) setTools(list map[string]*sdk.Tool) {
	c.tools = list
	close(c.changed)
	c.changed = make(chan struct{})
}

// refresh lists the tools again after the server said they changed.
func (c *Conn) refresh(ctx context.Context) {
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	if session == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, c.server.Capstan.ConnectTimeout)
	defer cancel()
	list, err := listTools(lctx, session)
	if err != nil {
		c.logger.Warn("mcp: listing the tools again after the server said they changed failed", "error", err)
		return
	}
	c.mu.Lock()
	if c.session == session {
		c.setTools(list)
	}
	c.mu.Unlock()
}

// watch waits for session to end. A stdio server's process is then
// started again, after a jittered backoff that grows with each restart in
// a row (reset once a session lasted a minute); an HTTP session is opened
// again by the next call.
func (c *Conn) watch(session *sdk.ClientSession) {
	started := time.Now()
	err := session.Wait()
	c.mu.Lock()
	if c.session == session {
		c.session = nil
	}
	closed := c.closed
	if time.Since(started) > time.Minute {
		c.restarts = 0
	}
	c.restarts++
	n := c.restarts
	c.mu.Unlock()
	if closed || !c.server.Stdio() {
		return
	}
	wait := restartPolicy.Delay(n, 0, rand.Float64())
	c.logger.Warn("mcp: the server's process ended; starting it again", "error", err, "restart", n, "after", wait.String())
	select {
	case <-time.After(wait):
	case <-c.done:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.server.Capstan.ConnectTimeout)
	defer cancel()
	if _, err := c.connect(ctx); err != nil {
		c.logger.Warn("mcp: starting the server again failed; the next call tries again", "error", err)
	}
}

// Tools returns the server's tools as last listed, by name.
func (c *Conn) Tools() map[string]*sdk.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*sdk.Tool, len(c.tools))
	for k, v := range c.tools {
		out[k] = v
	}
	return out
}

// Tool returns the server's tool called name as last listed, or nil.
func (c *Conn) Tool(name string) *sdk.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools[name]
}

// Changed returns a channel closed at the next change of the tool list.
func (c *Conn) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// MetaOperationID is the key of _meta under which every call carries its
// operation id, the same on every retry.
const MetaOperationID = "io.capstan/operation_id"

// ErrIdle reports a call that neither answered nor reported progress
// within its idle timeout; ErrCallTimeout one that did not answer within
// the server's call timeout. Both came after the request may have been
// written.
var (
	ErrIdle        = errors.New("no answer and no progress from the MCP server within the tool's idle timeout")
	ErrCallTimeout = errors.New("no answer from the MCP server within its call timeout")
)

// Call calls the server's tool name with args (a JSON object), carrying
// operationID in the request's _meta and a progress token of its own. The
// call ends with ErrIdle after the tool's idle timeout passes without an
// answer or a progress notification (each one starts it again), and with
// ErrCallTimeout after the server's call timeout whatever the progress;
// either way, and when ctx is cancelled, the SDK sends the server
// notifications/cancelled. When no session could be opened the error wraps
// ErrNotConnected: nothing was sent. Any other error came after the request
// may have been written.
func (c *Conn) Call(ctx context.Context, name string, args json.RawMessage, operationID string) (_ *sdk.CallToolResult, err error) {
	// The call's client span, whose context the request carries in its
	// _meta (traceparent), as the MCP servers that trace read it.
	ctx, span := captrace.Start(ctx, "tools/call "+name, oteltrace.WithSpanKind(oteltrace.SpanKindClient),
		oteltrace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", name),
			attribute.String("capstan.mcp.server", c.server.Name)))
	defer func() { captrace.End(span, err, "") }()
	session, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	settings := c.server.Capstan
	idle := settings.IdleTimeoutOf(name)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cctx, stop := context.WithTimeoutCause(cctx, settings.CallTimeout, ErrCallTimeout)
	defer stop()
	timer := time.AfterFunc(idle, func() { cancel(ErrIdle) })
	defer timer.Stop()
	token := fmt.Sprintf("capstan-%d", c.tokens.Add(1))
	c.progress.Store(token, func() { timer.Reset(idle) })
	defer c.progress.Delete(token)

	params := &sdk.CallToolParams{Name: name, Arguments: args}
	if operationID != "" {
		params.Meta = sdk.Meta{MetaOperationID: operationID}
	}
	params.Meta = withTraceContext(ctx, params.Meta)
	params.SetProgressToken(token)
	res, err := session.CallTool(cctx, params)
	var wire *jsonrpc.Error
	if err != nil && !errors.As(err, &wire) && cctx.Err() == nil {
		// Not an answer of the server, nor a deadline: the transport
		// failed, and the session with it. The next call opens another.
		c.forget(session)
	}
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		// Our own clock ended it, not the caller: say which, without
		// context.Canceled (the caller was not cancelled).
		switch cause := context.Cause(cctx); cause {
		case ErrIdle:
			err = fmt.Errorf("%w (%s)", ErrIdle, idle)
		case ErrCallTimeout:
			err = fmt.Errorf("%w (%s)", ErrCallTimeout, settings.CallTimeout)
		}
	}
	return res, err
}

// withTraceContext is meta with the trace context of ctx (traceparent,
// and tracestate and baggage when there are any), as the MCP
// specification's _meta carries it; meta itself when ctx has no span.
func withTraceContext(ctx context.Context, meta sdk.Meta) sdk.Meta {
	if !oteltrace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	carrier := propagation.MapCarrier{}
	captrace.Propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return meta
	}
	if meta == nil {
		meta = sdk.Meta{}
	}
	for k, v := range carrier {
		meta[k] = v
	}
	return meta
}

// forget drops and closes session, whose transport failed, so the next
// call opens another (a stdio server's process is stopped with it, and its
// watcher starts it again).
func (c *Conn) forget(session *sdk.ClientSession) {
	c.mu.Lock()
	if c.session == session {
		c.session = nil
	}
	c.mu.Unlock()
	_ = session.Close()
}

// Close ends the session (and a stdio server's process) and stops
// restarting it.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	session := c.session
	c.session = nil
	c.mu.Unlock()
	if session != nil {
		return session.Close()
	}
	return nil
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// logWriter logs a stdio server's standard error, line by line.
type logWriter struct {
	logger *slog.Logger
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.logger.Info("mcp server stderr", "line", string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
