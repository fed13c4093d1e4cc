package workerapp

import (
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/tool"
)

// newBreakers returns one breaker per dependency and operation class, for
// this worker (docs/design.md §7), logging and counting their transitions;
// nil when CAPSTAN_BREAKERS=off. Each breaker is made on its key's first
// use, so a tool of the program's own has its breaker like a built-in one;
// publishBreakers shows them all from the start.
func (w *Worker) newBreakers(cfg config.Config) (*breaker.Set, error) {
	if cfg.BreakersOff {
		w.logger.Warn("CAPSTAN_BREAKERS=off: every call is sent, whatever the state of its dependency")
		return nil, nil
	}
	opts := breaker.Options{Logger: w.logger}
	if w.metrics != nil {
		opts.OnStateChange = func(t breaker.Transition) {
			w.metrics.BreakerTransition(string(t.Key), string(t.From), string(t.To))
		}
	}
	set, err := breaker.NewSet(cfg.Breakers, opts)
	if err != nil {
		return nil, fmt.Errorf("CAPSTAN_BREAKER_*: %w", err)
	}
	return set, nil
}

// publishBreakers shows, in the metrics, the state of every breaker this
// worker can use from the start, not from its first transition: the
// ledger's, Slack's, each model provider's, and the one each tool of
// tools goes through (activities.ToolBreaker: github/read, mcp/<server>,
// a program's own tool's <service>/write...).
func (w *Worker) publishBreakers(tools *tool.Registry) {
	if w.metrics == nil || w.breakers == nil {
		return
	}
	known := []breaker.Key{breaker.SlackPost, breaker.Ledger}
	for _, name := range sortedKeys(w.clients.Providers) {
		known = append(known, breaker.Model(name))
	}
	for _, name := range w.mcp.Servers() {
		known = append(known, breaker.Key("mcp/"+name))
	}
	for _, name := range tools.Names() {
		t, _ := tools.Get(name) // a name the registry lists
		known = append(known, activities.ToolBreaker(t))
	}
	slices.Sort(known)
	for _, k := range slices.Compact(known) {
		w.metrics.BreakerTransition(string(k), "", string(w.breakers.State(k)))
	}
}
