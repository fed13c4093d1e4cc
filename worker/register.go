package worker

import (
	"context"
	"errors"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/workerapp"
)

// Registration is capstan's workflow and activities made ready for a
// go.temporal.io/sdk/worker.Worker of the program's own, on the program's
// client: the program makes that worker with Interceptor among its
// interceptors, Registers on it, runs and stops it, then Closes the
// Registration. The worker's other options — task queue, identity, stop
// timeout, concurrency, versioning — are the program's;
// CAPSTAN_TASK_QUEUE, CAPSTAN_ACTIVITY_SLOTS and CAPSTAN_DEPLOYMENT_* do
// not apply.
//
//	reg, err := worker.NewRegistration(ctx, c, worker.Options{Tools: tools})
//	if err != nil { ... }
//	defer reg.Close()
//	w := sdkworker.New(c, "capstan", sdkworker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{mine, reg.Interceptor()},
//	})
//	if err := reg.Register(w); err != nil { ... }
//	err = w.Run(sdkworker.InterruptCh())
type Registration struct {
	app *workerapp.Worker
}

// ErrClientMismatch: Options.Client is set to another client than the one
// NewRegistration was given.
var ErrClientMismatch = errors.New("Options.Client is another client than NewRegistration's: leave it nil")

// NewRegistration checks o and connects what capstan's activities need,
// as New does, on the program's client c (never closed by the
// Registration), but makes no Temporal worker: Register puts the workflow
// and activities on the program's. It fails as New does, with one
// sentence quoting no secret.
//
// The Temporal worker must have Interceptor among its interceptors, which
// Temporal fixes when the worker is made: that is why a Registration comes
// before the worker it registers on, rather than from it.
func NewRegistration(ctx context.Context, c client.Client, o Options) (*Registration, error) {
	if c == nil {
		return nil, errors.New("NewRegistration needs the program's Temporal client: c is nil")
	}
	if o.Client != nil && o.Client != c {
		return nil, ErrClientMismatch
	}
	ao, err := o.app(c)
	if err != nil {
		return nil, err
	}
	w, err := workerapp.Open(ctx, ao)
	if err != nil {
		return nil, public(err)
	}
	return &Registration{app: w}, nil
}

// Interceptor is the interceptor the program's Temporal worker must have
// (in its worker.Options.Interceptors, with any of the program's): the
// boundary that masks the worker's secrets in every failure and result
// its activities hand Temporal, and that hands on at once, when the
// worker stops, the operations of activities its stop timeout cut short.
// Without it a secret could reach workflow history.
func (r *Registration) Interceptor() interceptor.WorkerInterceptor {
	return r.app.Interceptor()
}

// Register registers capstan's workflow (AgentTask) and activities, with
// Options.Tools, on w, the program's worker made with Interceptor. Once
// per Registration ([ErrAlreadyRegistered]). The ledger's retention
// (CAPSTAN_LEDGER_GC_EVERY) runs from now until Close.
func (r *Registration) Register(w sdkworker.Registry) error {
	return public(r.app.Register(w))
}

// Close, once the program's worker has stopped, waits (bounded) for the
// activities its stop cut short to hand their operations on, then closes
// what NewRegistration opened: the ledger, the MCP servers, the metrics
// and live stream endpoints. It does not close the client.
func (r *Registration) Close() {
	r.app.Close()
}

// Identity is the name the activities lease operations under in the
// ledger (Options.Identity, or capstan-worker@<host>/<pid>/<random>).
func (r *Registration) Identity() string { return r.app.Identity() }

// MetricsURL is where capstan's Prometheus metrics are served; "" when
// none are (CAPSTAN_METRICS_ADDR set empty). The Temporal SDK's own
// metrics are the program's client's.
func (r *Registration) MetricsURL() string { return r.app.MetricsURL() }
