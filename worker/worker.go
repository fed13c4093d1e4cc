package worker

import (
	"context"

	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/tool"
)

// Worker is a capstan worker with a Temporal worker of its own: checked,
// connected and serving its metrics, not yet polling. Add tools with
// RegisterTool, then Run it (or Start and Stop it); Close releases what
// New opened.
type Worker struct {
	app *workerapp.Worker
}

// New checks the configuration of o and connects everything the worker
// needs: the ledger, the Temporal client (dialled unless o.Client is
// given), the MCP servers, the metrics and live stream endpoints; it waits
// (bounded) for a namespace created a moment before, and registers
// capstan's search attributes when the namespace lacks them. It fails
// with one sentence on the first problem, quoting no secret; every check
// that needs nothing outside the process comes first, so a bad
// configuration or a refused tool opens, dials and starts nothing. On
// failure what it had opened is closed.
func New(ctx context.Context, o Options) (*Worker, error) {
	ao, err := o.app(o.Client)
	if err != nil {
		return nil, err
	}
	w, err := workerapp.Open(ctx, ao)
	if err != nil {
		return nil, public(err)
	}
	return &Worker{app: w}, nil
}

// Run is New, then Worker.Run until ctx ends, then Close: the whole life
// of a worker.
func Run(ctx context.Context, o Options) error {
	w, err := New(ctx, o)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.Run(ctx)
}

// RegisterTool adds t to the tools the model is offered, as Options.Tools
// does. It refuses a name another tool of the worker has
// ([ErrDuplicateTool]: a built-in tool, an MCP server's, another of the
// program's), a tool the worker cannot offer ([ErrInvalidTool]), and any
// tool once Run or Start has registered the worker's activities
// ([ErrAlreadyRegistered]); each refusal is one sentence naming the tool.
func (w *Worker) RegisterTool(t tool.Tool) error {
	return public(w.app.AddTool(t))
}

// Run registers capstan's workflow and activities, with every tool added,
// on the worker's task queue and polls until ctx is cancelled; then it
// stops gracefully: running activities get Options.StopTimeout to finish,
// and what is still running is handed on to another worker at once. It
// returns early with the error that stopped the worker if it cannot go
// on (the namespace is gone, say). Run does not Close the worker.
func (w *Worker) Run(ctx context.Context) error {
	return public(w.app.Run(ctx))
}

// Start registers, as Run does, and starts polling in the background; Stop
// stops it. For a program that runs the worker beside other work rather
// than as its main loop.
func (w *Worker) Start() error {
	return public(w.app.Start())
}

// Stop stops polling gracefully, as Run does when its context ends; it
// returns once the activities it cut short have handed their operations on
// (bounded). A worker that never started has nothing to stop.
func (w *Worker) Stop() {
	w.app.Stop()
}

// Close releases what New opened: the Temporal client when the worker
// dialled it, the metrics and live stream endpoints, the MCP servers and
// the ledger. Stop the worker (or let Run return) first.
func (w *Worker) Close() {
	w.app.Close()
}

// TaskQueue is the queue the worker polls.
func (w *Worker) TaskQueue() string { return w.app.TaskQueue() }

// Identity is the name the worker polls and leases operations under.
func (w *Worker) Identity() string { return w.app.Identity() }

// MetricsURL is where the worker serves its Prometheus metrics, such as
// http://127.0.0.1:9464/metrics; "" when it serves none
// (CAPSTAN_METRICS_ADDR set empty).
func (w *Worker) MetricsURL() string { return w.app.MetricsURL() }
