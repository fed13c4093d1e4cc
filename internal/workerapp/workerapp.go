// Package workerapp builds a capstan worker from its configuration and runs
// it: the Temporal client, the ledger, the circuit breakers, the tool
// registry, the model providers, the reconcilers, the metrics endpoint and
// the live stream of model attempts, wired once, here. The worker binary is
// a thin main over [Run]; the benchmark starts its pools through [New], so
// what it measures is the worker that ships.
//
// A worker talks to the model providers, GitHub and Slack only over HTTP,
// at the base URLs of its configuration (OPENAI_BASE_URL,
// ANTHROPIC_BASE_URL, GITHUB_API_URL, SLACK_API_URL): the offline sandbox
// is a separate program such a worker is pointed at, never part of it.
// Secrets go from the configuration into the clients built here and nowhere
// else; no workflow input carries one.
package workerapp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/redact"
	captrace "github.com/capstanhq/capstan/internal/trace"
	"github.com/capstanhq/capstan/tool"
)

// dialTimeout bounds reaching the Temporal server at start.
const dialTimeout = 10 * time.Second

// Options are what a worker is built from: its configuration, and what the
// process that embeds it decides.
type Options struct {
	// Config is the worker's configuration (config.FromLookupEnv). New
	// checks it with ValidateWorker.
	Config config.Config
	// LookupEnv is the environment the MCP file's ${VAR} expand from
	// (CAPSTAN_MCP_CONFIG); nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// LiveStream says where the live stream of model attempts is served
	// (config.LiveStreamFromLookupEnv); an empty Addr serves none.
	LiveStream config.LiveStream
	// Logger receives the worker's log lines; those written with an
	// activity's context carry its ids. Nil discards them.
	Logger *slog.Logger
	// Stdout receives the lines a person starting the worker reads: where
	// metrics and live streams are served, and the queue it polls. Nil
	// discards them.
	Stdout io.Writer
	// Identity names the worker in Temporal and in ledger leases; empty
	// means capstan-worker@<host>/<pid>/<random>.
	Identity string
	// StopTimeout is how long running activities may take to finish once
	// the worker is asked to stop, before their contexts are cancelled.
	StopTimeout time.Duration
	// Dial connects the worker's Temporal client with the identity, logger
	// and metrics handler the worker chose. Nil means config.DialTemporal:
	// TEMPORAL_ADDRESS and the rest of Temporal's environment
	// configuration.
	Dial DialFunc
	// WrapLedger, when set, wraps the ledger the activities use (the bench
	// times every call through it). The worker still closes the store it
	// opened.
	WrapLedger func(activities.Ledger) activities.Ledger
	// Client, when set, is the Temporal client the worker uses instead of
	// dialling one (Dial is then unused), on the namespace Namespace
	// (empty: client.DefaultNamespace). The worker never closes it. Its
	// data converter is its owner's: a configuration with
	// CAPSTAN_CODEC_KEYS is refused (ErrCodecWithClient), since the worker
	// could not put its payload codec on a client it did not dial.
	Client    client.Client
	Namespace string
	// Tools are tools of the program that embeds the worker, offered to
	// the model beside the built-in and MCP ones, each under its name
	// (AddTool says what is refused).
	Tools []tool.Tool
}

// DialFunc connects a Temporal client; it returns the options it dialled
// with, for their namespace.
type DialFunc func(ctx context.Context, identity string, logger tlog.Logger, metrics client.MetricsHandler) (client.Client, client.Options, error)

// Worker is a started worker: connected to everything it needs, registered
// on its task queue, not yet polling. Run (or Start and Stop) polls; Close
// releases what New opened.
type Worker struct {
	identity  string
	taskQueue string
	logger    *slog.Logger

	client        client.Client
	namespace     string // the client's: the one its ledger gc asks about
	worker        worker.Worker
	ledger        ledger.Store
	metrics       *metrics.Metrics // nil when CAPSTAN_METRICS_ADDR is empty
	metricsServer *metrics.Server
	liveHub       *livestream.Hub // nil when CAPSTAN_STREAM_ADDR is empty
	liveServer    *livestream.Server
	gc            config.LedgerGC  // the periodic ledger retention Run runs (gc.go)
	mcp           *mcp.Pool        // the MCP servers of CAPSTAN_MCP_CONFIG; nil for none (mcp.go)
	redactor      *redact.Redactor // the worker's secrets, masked where they would leave it (checks.go)
	handOff       *activities.HandOff
	tracing       *captrace.Provider // OTEL_EXPORTER_OTLP_ENDPOINT's; off (no-op) when unset
	floor         *policy.Policy     // CAPSTAN_POLICY, decided beside each task's rules; nil for none
	ownsClient    bool               // the worker dialled client, so Close closes it

	// What registering needs and Open leaves for it (register.go): the
	// registry of tools is final only then, once the embedding program
	// has added its own (AddTool).
	cfg         config.Config
	clients     Clients
	userTools   []tool.Tool
	breakers    *breaker.Set
	wrapLedger  func(activities.Ledger) activities.Ledger
	stopTimeout time.Duration
	stdout      io.Writer
	// mu guards acts and registered: set once, by the first Register.
	mu         sync.Mutex
	acts       *activities.Activities
	registered bool
	stopGC     func() // ends the ledger gc of a registration (Register); nil otherwise
}

// handOffWait bounds how long a stopped worker waits, once its stop
// timeout has cancelled what was still running, for those activities to
// record where they stand and report it (activities.HandOff) before it
// closes the ledger and the client: a read-back and a ledger record at
// most, each bounded by 15 s.
const handOffWait = 35 * time.Second

// Run builds a worker from o and polls until ctx is cancelled, then stops
// gracefully and closes it: the whole life of a worker process.
func Run(ctx context.Context, o Options) error {
	w, err := New(ctx, o)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.Run(ctx)
}

// New checks the configuration and connects everything, failing with one
// sentence on the first problem: a missing key, a bad ledger DSN, a metrics
// address it cannot listen on, an unreachable server, a namespace the
// server does not serve within CAPSTAN_NAMESPACE_WAIT (AwaitNamespace). Every check that
// needs nothing outside the process (checkConfig) comes first, so a bad
// configuration opens no listener, registers nothing and starts no MCP
// server. On failure whatever it had opened is closed. No secret of the
// configuration appears in the error, nor in a line the worker logs.
//
// New is Open followed by the worker's own Temporal worker, with the
// workflow and the activities registered on it.
func New(ctx context.Context, o Options) (*Worker, error) {
	w, err := Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := w.build(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Open is New but for the Temporal worker: everything is checked,
// connected and served, and nothing is registered yet, so that tools may
// still be added (AddTool) before Run or Start register them on a worker
// of its own, or Register on a worker of the caller's.
func Open(ctx context.Context, o Options) (_ *Worker, err error) {
	cfg := o.Config
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	ok, err := checkConfig(cfg, o.LookupEnv)
	if err == nil && o.Client != nil && len(cfg.CodecKeys) > 0 {
		err = ErrCodecWithClient
	}
	if err == nil {
		err = checkTools(o.Tools)
	}
	if err != nil {
		return nil, ok.redactor.Error(err)
	}
	if o.Dial == nil {
		o.Dial = dialFromEnvironment(codec.PayloadCodec(ok.keys))
	}
	w := &Worker{identity: o.Identity, taskQueue: cfg.TaskQueue, gc: cfg.LedgerGC, redactor: ok.redactor, floor: ok.floor,
		logger: logids.Logger(slog.New(ok.redactor.Handler(o.Logger.Handler()))),
		cfg:    cfg, userTools: o.Tools, wrapLedger: o.WrapLedger, stopTimeout: o.StopTimeout, stdout: o.Stdout}
	if w.identity == "" {
		w.identity = newIdentity()
	}
	defer func() {
		if err != nil {
			w.Close()
			err = w.redactor.Error(err)
		}
	}()

	// Traces first: the clients built next trace their HTTP calls when
	// they are on.
	if w.tracing, err = captrace.Setup(ctx, o.LookupEnv, "capstan-worker"); err != nil {
		return nil, err
	}
	if w.tracing.On() {
		fmt.Fprintf(o.Stdout, "traces: OTLP to %s\n", w.tracing.Endpoint)
	}
	clients, err := NewClients(cfg, w.logger)
	if err != nil {
		return nil, err
	}
	if err := w.serveMetrics(cfg.MetricsAddr, o.Stdout); err != nil {
		return nil, err
	}
	if err := w.serveLive(o.LiveStream, o.Stdout); err != nil {
		return nil, err
	}
	w.ledger, err = ledgerdsn.Open(ctx, cfg.LedgerDSN, ledgerdsn.Options{Logger: w.logger, Sealer: codec.Sealer(ok.keys)})
	if err != nil {
		return nil, fmt.Errorf("open the ledger (CAPSTAN_LEDGER_DSN): %w", err)
	}
	if err := clients.CheckGitHubApp(ctx); err != nil {
		return nil, err
	}
	if clients, err = w.openMCP(ctx, ok.mcp, clients); err != nil {
		return nil, err
	}
	// A tool of the program's own may take no name the worker's tools
	// have: the built-in ones, or an MCP server's.
	for _, t := range o.Tools {
		if err := collides(t.Name(), clients.Tools.Names(), nil); err != nil {
			return nil, err
		}
	}
	w.clients = clients
	if w.breakers, err = w.newBreakers(cfg); err != nil {
		return nil, err
	}
	if err := w.configureMCPBreakers(w.breakers); err != nil {
		return nil, err
	}

	if o.Client != nil {
		w.client, w.namespace = o.Client, o.Namespace
		if w.namespace == "" {
			w.namespace = client.DefaultNamespace
		}
	} else {
		var sdkMetrics client.MetricsHandler
		if w.metrics != nil {
			sdkMetrics = w.metrics.TemporalHandler()
		}
		c, copts, err := o.Dial(ctx, w.identity, tlog.NewStructuredLogger(w.logger), sdkMetrics)
		if err != nil {
			return nil, err
		}
		w.client, w.namespace, w.ownsClient = c, copts.Namespace, true
	}
	// A namespace created a moment ago is not served yet: wait for it,
	// bounded, rather than fail on its first call.
	if err := AwaitNamespace(ctx, w.client, w.namespace, cfg.NamespaceWait, o.Stdout, w.logger); err != nil {
		return nil, err
	}
	if err := EnsureSearchAttributes(ctx, w.client, w.namespace, w.logger); err != nil {
		return nil, err
	}
	// Once asked to stop, the worker stops polling and gives running
	// activities StopTimeout to finish before their contexts are
	// cancelled; those then hand their operations on (activities.HandOff).
	w.handOff = activities.NewHandOff(w.client, w.logger, w.redactor)
	return w, nil
}

// build gives the worker a Temporal worker of its own on its task queue,
// with the hand-off interceptor, and registers the workflow and the
// activities on it; once (Run and Start call it for a worker from Open).
func (w *Worker) build() error {
	w.mu.Lock()
	built := w.worker != nil
	w.mu.Unlock()
	if built {
		return nil
	}
	cfg := w.cfg
	// The tracing interceptor outermost: its spans end with the errors
	// the hand-off boundary masked.
	interceptors, err := w.tracing.WorkerInterceptors()
	if err != nil {
		return err
	}
	interceptors = append(interceptors, w.handOff.Interceptor())
	tw := worker.New(w.client, cfg.TaskQueue, worker.Options{Identity: w.identity, WorkerStopTimeout: w.stopTimeout,
		Interceptors: interceptors, DeploymentOptions: deploymentOptions(cfg.Deployment),
		MaxConcurrentActivityExecutionSize: cfg.ActivitySlots})
	if err := w.register(tw); err != nil {
		return w.redactor.Error(err)
	}
	w.mu.Lock()
	w.worker = tw
	w.mu.Unlock()
	w.logger.Info("worker ready", "identity", w.identity, "task_queue", cfg.TaskQueue, "ledger", ledgerdsn.Redact(cfg.LedgerDSN),
		"deployment", cfg.Deployment.Name, "build_id", cfg.Deployment.BuildID)
	fmt.Fprintf(w.stdout, "worker %s polling task queue %q%s\n", w.identity, cfg.TaskQueue, versionNote(cfg.Deployment))
	return nil
}

// Identity is the name the worker polls and leases under.
func (w *Worker) Identity() string { return w.identity }

// TaskQueue is the queue the worker polls.
func (w *Worker) TaskQueue() string { return w.taskQueue }

// Run polls until ctx is cancelled, then stops gracefully. It returns early
// with the error that stopped the worker if it cannot go on (the namespace
// is gone, say).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.build(); err != nil {
		return err
	}
	stopped := make(chan any)
	go func() {
		<-ctx.Done()
		close(stopped)
	}()
	defer w.startLedgerGC(ctx)() // a pass ends before the ledger closes
	err := w.worker.Run(stopped)
	w.awaitHandOff()
	if err != nil {
		return fmt.Errorf("worker stopped: %w", err)
	}
	w.logger.Info("worker stopped")
	return nil
}

// awaitHandOff waits, after the worker stopped, for the activities its
// stop timeout cut short to report where they stand (activities.HandOff).
func (w *Worker) awaitHandOff() {
	if w.handOff != nil && !w.handOff.Wait(handOffWait) {
		w.logger.Warn("stopping worker: activities still running after the hand-off wait; their heartbeat timeouts will tell the server",
			"waited", handOffWait)
	}
}

// Start starts polling and returns; Stop stops it. For a process that runs
// several workers side by side (the bench); a worker process uses Run.
func (w *Worker) Start() error {
	if err := w.build(); err != nil {
		return err
	}
	if err := w.worker.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", w.identity, err)
	}
	return nil
}

// Stop stops polling gracefully, as Run does when its context ends. A
// worker that never started has nothing to stop.
func (w *Worker) Stop() {
	w.mu.Lock()
	tw := w.worker
	w.mu.Unlock()
	if tw == nil {
		return
	}
	tw.Stop()
	w.awaitHandOff()
}

// Close releases what New opened: the Temporal client (when the worker
// dialled it), the metrics and live stream endpoints, the MCP servers and
// the ledger. Stop the worker first; for activities registered on a
// worker of the caller's (Register), stop that one first: Close then
// waits for the hand-off of what its stop cut short.
func (w *Worker) Close() {
	w.mu.Lock()
	registeredElsewhere := w.registered && w.worker == nil
	stopGC := w.stopGC
	w.stopGC = nil
	w.mu.Unlock()
	if registeredElsewhere {
		w.awaitHandOff()
	}
	if stopGC != nil {
		stopGC()
	}
	if w.client != nil && w.ownsClient {
		w.client.Close()
	}
	if w.metricsServer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.metricsServer.Close(ctx)
		cancel()
	}
	if w.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.metrics.Close(ctx)
		cancel()
	}
	if w.liveServer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.liveServer.Close(ctx)
		cancel()
	}
	if w.ledger != nil {
		_ = w.ledger.Close()
	}
	w.mcp.Close()
	if w.tracing != nil {
		// The spans still buffered go out, within a bound.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.tracing.Shutdown(ctx)
		cancel()
	}
}

// dialFromEnvironment is config.DialTemporal, bounded by dialTimeout,
// payloads encoded by pc (nil: plain).
func dialFromEnvironment(pc converter.PayloadCodec) DialFunc {
	return func(ctx context.Context, identity string, logger tlog.Logger, m client.MetricsHandler) (client.Client, client.Options, error) {
		return config.DialTemporal(ctx, identity, logger, m, pc, dialTimeout)
	}
}

func newIdentity() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("capstan-worker@%s/%d/%s", config.Hostname(), os.Getpid(), hex.EncodeToString(b))
}

// checkPolicy loads the worker's own CAPSTAN_POLICY, its floor: decided
// on every call beside the defaults and the rules the task's starter
// recorded (policy.Stack), so a deny there holds whatever a task's rules
// allow. A file that does not load refuses the worker with the one
// sentence of policy.Load, naming the file, the line and the rule, before
// it serves anything, as `starter run` refuses to start a task with one.
// No file is nil.
func checkPolicy(file string) (*policy.Policy, error) {
	if file == "" {
		return nil, nil
	}
	p, err := policy.Load(file)
	if err != nil {
		return nil, fmt.Errorf("CAPSTAN_POLICY: %w", err)
	}
	return p, nil
}

// itemCacheBytes turns CAPSTAN_ITEM_CACHE_BYTES, where 0 keeps no items,
// into activities.Deps.ItemCacheBytes, where 0 is the default and below 0
// keeps none.
func itemCacheBytes(configured int) int {
	if configured == 0 {
		return -1
	}
	return configured
}
