package workerapp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/workflows"
	"github.com/capstanhq/capstan/tool"
)

// This file registers a worker's workflow and activities, on a Temporal
// worker of its own (build) or of the program that embeds it (Register),
// with the tools of that program beside the built-in and MCP ones. A
// program's tool is registered like a built-in one: the activities decide
// its calls with the task's policy, ask for approval, count the budget,
// label its metrics with its name and send it through its breaker
// ("<service>/write" from its name, or the one it names: tool.Guarded).

var (
	// ErrDuplicateTool is wrapped by the error refusing a tool whose name
	// another tool of the worker has: a built-in one, an MCP server's, or
	// another of the program's.
	ErrDuplicateTool = errors.New("duplicate tool name")
	// ErrBadTool is wrapped by the error refusing a tool the worker cannot
	// offer a model: nil, a name a model API refuses, no schema, no class.
	ErrBadTool = errors.New("unusable tool")
	// ErrRegistered is wrapped by the error of a second registration of a
	// worker's activities, and of a tool added after the first.
	ErrRegistered = errors.New("the worker's workflow and activities are registered already")
	// ErrCodecWithClient refuses CAPSTAN_CODEC_KEYS for a worker given a
	// Temporal client (Options.Client): its payloads would not be encoded.
	ErrCodecWithClient = errors.New("CAPSTAN_CODEC_KEYS is set, but the worker was given a Temporal client, whose data converter it cannot change: " +
		"dial the client yourself with your codec and unset CAPSTAN_CODEC_KEYS, or let the worker dial (no client given)")
)

// toolName is what the model APIs take as a function's name (OpenAI's
// rule, the stricter): letters, digits, '_' and '-', at most 64.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// mcpPrefix starts the names of MCP servers' tools (mcp__SERVER__TOOL),
// which the starter's checks and the policy read as such.
const mcpPrefix = "mcp__"

// checkTool refuses a tool of the program's that the worker could not
// offer a model, in one sentence naming it.
func checkTool(t tool.Tool) error {
	if t == nil {
		return fmt.Errorf("%w: a nil tool.Tool", ErrBadTool)
	}
	name := t.Name()
	switch {
	case !toolName.MatchString(name):
		return fmt.Errorf("%w: tool name %q is not 1 to 64 letters, digits, '_' or '-', as the model APIs require", ErrBadTool, name)
	case strings.HasPrefix(name, mcpPrefix):
		return fmt.Errorf("%w: tool name %q starts with %s, which names MCP servers' tools (mcp__SERVER__TOOL): give it another name", ErrBadTool, name, mcpPrefix)
	case t.Schema() == nil:
		return fmt.Errorf("%w: tool %q has no argument schema (Schema returned nil)", ErrBadTool, name)
	}
	switch c := t.Class(); c {
	case tool.ReadOnly, tool.Idempotent, tool.Conditional, tool.Unsafe:
	default:
		return fmt.Errorf("%w: tool %q has class %q, which is none of read_only, idempotent, conditional and unsafe", ErrBadTool, name, c)
	}
	return nil
}

// checkTools checks each tool, and that no two of them, nor one and a
// built-in tool, share a name; it needs nothing outside the process, so
// Open runs it before anything else (an MCP server's tools are known only
// once it answers, and start with mcpPrefix, which checkTool refuses).
func checkTools(ts []tool.Tool) error {
	var names []string
	for _, t := range ts {
		if err := checkTool(t); err != nil {
			return err
		}
		if err := collides(t.Name(), builtinToolNames(), names); err != nil {
			return err
		}
		names = append(names, t.Name())
	}
	return nil
}

func builtinToolNames() []string {
	names := make([]string, 0, len(policy.BuiltinTools))
	for n := range policy.BuiltinTools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// collides refuses name when the worker's own tools (built-in or MCP) or
// the program's tools added so far have it.
func collides(name string, own, added []string) error {
	if slices.Contains(own, name) {
		return fmt.Errorf("%w: tool %q: the worker has a tool of that name already (its own tools are %s): give yours another name",
			ErrDuplicateTool, name, strings.Join(own, ", "))
	}
	if slices.Contains(added, name) {
		return fmt.Errorf("%w: tool %q is given twice: each tool needs a name of its own", ErrDuplicateTool, name)
	}
	return nil
}

// AddTool adds a tool of the program's to those the model is offered. It
// refuses, in one sentence, a tool checkTool refuses, a name another tool
// of the worker has (ErrDuplicateTool), and any tool once the activities
// are registered (ErrRegistered): Run, Start and Register fix the tools.
func (w *Worker) AddTool(t tool.Tool) error {
	if err := checkTool(t); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.registered {
		return fmt.Errorf("add tool %q: %w: add tools before Run, Start or Register", t.Name(), ErrRegistered)
	}
	added := make([]string, 0, len(w.userTools))
	for _, u := range w.userTools {
		added = append(added, u.Name())
	}
	if err := collides(t.Name(), w.clients.Tools.Names(), added); err != nil {
		return err
	}
	w.userTools = append(w.userTools, t)
	return nil
}

// Interceptor is the interceptor a Temporal worker running this worker's
// activities must have (activities.HandOff): the boundary that masks the
// worker's secrets in what its activities hand Temporal, and hands on, at
// once, what a stopping worker cut short. A worker of the caller's gets
// it in its worker.Options.Interceptors before Register.
func (w *Worker) Interceptor() interceptor.WorkerInterceptor {
	return w.handOff.Interceptor()
}

// Register registers the task workflow and the activities, with every
// tool added so far, on r: a Temporal worker of the caller's, on the
// caller's client (Options.Client), which must have Interceptor. The
// caller runs and stops it; Close, after it stopped, waits for the
// hand-off and closes the rest. The ledger's retention
// (CAPSTAN_LEDGER_GC_EVERY) runs from now until Close. Once per worker.
func (w *Worker) Register(r worker.Registry) error {
	if err := w.register(r); err != nil {
		return w.redactor.Error(err)
	}
	stop := w.startLedgerGC(context.Background())
	w.mu.Lock()
	w.stopGC = stop
	w.mu.Unlock()
	w.logger.Info("worker registered", "identity", w.identity, "tools", len(w.clients.Tools.Names()))
	return nil
}

// register builds the activities over the final registry of tools and
// registers them and the workflow on r; once.
func (w *Worker) register(r worker.Registry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.registered {
		return ErrRegistered
	}
	all := make([]tool.Tool, 0, len(w.clients.Tools.Names())+len(w.userTools))
	for _, name := range w.clients.Tools.Names() {
		t, _ := w.clients.Tools.Get(name) // a name the registry lists
		all = append(all, t)
	}
	for _, t := range w.userTools {
		all = append(all, t)
		w.logger.Info("tool offered", "tool", t.Name(), "class", string(t.Class()))
	}
	cl := w.clients
	cl.Tools = tool.NewRegistry(all...) // AddTool and checkTools refused every duplicate
	w.publishBreakers(cl.Tools)
	acts, err := w.newActivities(w.cfg, cl, w.breakers)
	if err != nil {
		return err
	}
	r.RegisterWorkflow(workflows.AgentTask)
	r.RegisterActivity(acts)
	registerBuildExtras(r)
	w.clients, w.acts, w.registered = cl, acts, true
	return nil
}

// MetricsURL is where the worker serves its Prometheus metrics; "" when it
// serves none (CAPSTAN_METRICS_ADDR empty).
func (w *Worker) MetricsURL() string {
	if w.metricsServer == nil {
		return ""
	}
	return w.metricsServer.URL()
}
