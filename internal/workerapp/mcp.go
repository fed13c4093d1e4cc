package workerapp

import (
	"context"
	"fmt"

	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/tool"
)

// openMCP connects to the MCP servers of file, CAPSTAN_MCP_CONFIG as
// checkConfig read it (nil for none), and returns cl with their tools
// added to the registry beside the built-in ones. An unreachable server or
// a tool setting naming a tool its server does not offer stops the worker
// with one sentence naming the server and the field. The values ${VAR}
// expands to go only into the connections.
func (w *Worker) openMCP(ctx context.Context, file *mcp.Config, cl Clients) (_ Clients, err error) {
	if file == nil {
		return cl, nil
	}
	w.mcp, err = mcp.Open(ctx, file, w.logger)
	if err != nil {
		return cl, fmt.Errorf("CAPSTAN_MCP_CONFIG: %w", err)
	}
	all := make([]tool.Tool, 0, len(cl.Tools.Names())+len(w.mcp.Tools()))
	for _, name := range cl.Tools.Names() {
		t, _ := cl.Tools.Get(name) // a name the registry lists
		all = append(all, t)
	}
	for _, t := range w.mcp.Tools() {
		all = append(all, t)
		m := mcp.Unwrap(t)
		w.logger.Info("mcp tool offered", "tool", t.Name(), "server", m.Server(), "class", string(t.Class()), "lookup", m.Lookup())
	}
	cl.Tools = tool.NewRegistry(all...)
	return cl, nil
}

// configureMCPBreakers gives each MCP server that sets breaker thresholds
// (capstan.breaker) its own, on its breaker mcp/<server>.
func (w *Worker) configureMCPBreakers(set *breaker.Set) error {
	for key, st := range w.mcp.Breakers() {
		if err := set.Configure(breaker.Key(key), st); err != nil {
			return fmt.Errorf("CAPSTAN_MCP_CONFIG: %w", err)
		}
	}
	return nil
}
