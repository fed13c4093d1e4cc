package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workerapp"
)

// pool is a set of workers polling one task queue in this process. Each
// worker has what a worker process has of its own: a Temporal client, HTTP
// clients, metrics and live-stream endpoints and (for capstan) a ledger
// connection; they share only the Go runtime, and the SQLite file, as
// worker processes on one machine would.
type pool struct {
	queue string
	stops []func() // in start order; stop runs them backwards
}

func (p *pool) stop() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
}

// workerOptions says how one bench worker is configured beyond pointing it
// at the sandbox.
type workerOptions struct {
	queue     string
	ledgerDSN string
	breakers  bool // CAPSTAN_BREAKERS on or off
}

// workerConfig is the configuration of one bench worker, read as a worker
// process reads its environment: the sandbox's worker environment (its
// base URLs and tokens), the pool's queue and ledger, and endpoints for
// metrics and live streams on free loopback ports (a worker serves both by
// default). Everything else keeps the worker's default.
func workerConfig(sb *sandbox.Sandbox, o workerOptions) (config.Config, config.LiveStream, error) {
	env := map[string]string{
		"CAPSTAN_LEDGER_DSN":   o.ledgerDSN,
		"CAPSTAN_METRICS_ADDR": "127.0.0.1:0",
		"CAPSTAN_STREAM_ADDR":  "127.0.0.1:0",
	}
	for _, kv := range sb.WorkerEnv(o.queue) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if !o.breakers {
		env["CAPSTAN_BREAKERS"] = "off"
	}
	lookup := func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
	ls, err := config.LiveStreamFromLookupEnv(lookup)
	return config.FromLookupEnv(lookup), ls, err
}

// dialer connects each worker's own Temporal client to the env's dev
// server; rpcs, when set, counts its calls.
func (e *env) dialer(rpcs *rpcCounter) workerapp.DialFunc {
	return func(ctx context.Context, identity string, logger tlog.Logger, m client.MetricsHandler) (client.Client, client.Options, error) {
		o := client.Options{
			HostPort:       e.server.FrontendHostPort(),
			Namespace:      "default",
			Identity:       identity,
			Logger:         logger,
			MetricsHandler: m,
		}
		if rpcs != nil {
			o.ConnectionOptions.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.interceptor)}
		}
		c, err := client.DialContext(ctx, o)
		return c, o, err
	}
}

// capstanOptions says how a capstan pool is built.
type capstanOptions struct {
	workers   int
	ledgerDSN string       // every worker opens its own store on it
	timer     *ledgerTimer // when set, every ledger call is timed
	rpcs      *rpcCounter  // when set, every call to the server is counted
	// breakers on or off (breakers.go); a worker's default is on, so every
	// pool but the outage's "off" run has them.
	breakers bool
	// sandbox the workers talk to; nil means the env's.
	sandbox *sandbox.Sandbox
}

// startCapstan starts a pool of capstan workers, each built by
// internal/workerapp — the package the worker binary runs — from a
// worker's configuration (workerConfig), so the pool is the worker that
// ships: its logger adding the task's ids, its metrics, live streams and
// breakers.
func (e *env) startCapstan(ctx context.Context, queue string, o capstanOptions) (*pool, error) {
	p := &pool{queue: queue}
	sb := o.sandbox
	if sb == nil {
		sb = e.sandbox
	}
	var wrap func(activities.Ledger) activities.Ledger
	if o.timer != nil {
		wrap = o.timer.wrap
	}
	for i := range o.workers {
		cfg, live, err := workerConfig(sb, workerOptions{queue: queue, ledgerDSN: o.ledgerDSN, breakers: o.breakers})
		if err != nil {
			p.stop()
			return nil, err
		}
		w, err := workerapp.New(ctx, workerapp.Options{
			Config:     cfg,
			LiveStream: live,
			Logger:     e.logger,
			Stdout:     io.Discard,
			Identity:   fmt.Sprintf("capstan-bench@%s/%d", queue, i),
			Dial:       e.dialer(o.rpcs),
			WrapLedger: wrap,
		})
		if err != nil {
			p.stop()
			return nil, err
		}
		if err := w.Start(); err != nil {
			w.Close()
			p.stop()
			return nil, err
		}
		p.stops = append(p.stops, func() { w.Stop(); w.Close() })
	}
	return p, nil
}

// startBare starts a pool of workers that run BareTask, the same task shape
// without capstan (bare.go), over the clients a capstan worker builds
// (workerapp.NewClients).
func (e *env) startBare(ctx context.Context, queue string, workers int, rpcs *rpcCounter) (*pool, error) {
	p := &pool{queue: queue}
	for i := range workers {
		identity := fmt.Sprintf("bare-bench@%s/%d", queue, i)
		cfg, _, err := workerConfig(e.sandbox, workerOptions{queue: queue})
		if err != nil {
			p.stop()
			return nil, err
		}
		cl, err := workerapp.NewClients(cfg, e.logger)
		if err != nil {
			p.stop()
			return nil, err
		}
		c, _, err := e.dialer(rpcs)(ctx, identity, tlog.NewStructuredLogger(e.logger), nil)
		if err != nil {
			p.stop()
			return nil, err
		}
		w := worker.New(c, queue, worker.Options{Identity: identity})
		w.RegisterWorkflow(BareTask)
		w.RegisterActivity(&bareActivities{providers: cl.Providers, tools: cl.Tools, slack: cl.Slack})
		if err := w.Start(); err != nil {
			c.Close()
			p.stop()
			return nil, fmt.Errorf("start worker %s: %w", identity, err)
		}
		p.stops = append(p.stops, func() { w.Stop(); c.Close() })
	}
	return p, nil
}
