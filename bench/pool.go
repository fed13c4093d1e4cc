package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/openai"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/reconcilers"
	"github.com/capstanhq/capstan/workflows"
)

// sandboxToken is what the bench's clients send; the fakes accept any.
const sandboxToken = "capstan-bench-token-not-a-secret"

// pool is a set of workers polling one task queue in this process. Each
// worker has what a worker process has of its own: a Temporal client, HTTP
// clients and (for capstan) a ledger connection; they share only the Go
// runtime, and the SQLite file, as worker processes on one machine would.
type pool struct {
	queue   string
	workers []worker.Worker
	closers []func()
}

func (p *pool) stop() {
	for _, w := range p.workers {
		w.Stop()
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// clients are the three external clients one worker builds from its
// configuration, exactly as worker/worker.go builds them.
type clients struct {
	providers map[string]model.Provider
	tools     *tools.Registry
	slack     *slack.Client
}

func (e *env) newClients(sb *sandbox.Sandbox, logger *slog.Logger) (clients, error) {
	cfg := config.FromEnv(func(string) string { return "" })
	if err := cfg.UseSandbox(sb.ModelURL, sb.GitHubURL, sb.SlackURL, sandboxToken); err != nil {
		return clients{}, err
	}
	httpClient := &http.Client{Timeout: time.Minute}
	gh, err := githubtools.NewClient(cfg.GitHubAPIURL, cfg.GitHubToken, httpClient)
	if err != nil {
		return clients{}, err
	}
	prov := openai.New(openai.Config{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey,
		ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger})
	return clients{
		providers: map[string]model.Provider{"openai": prov, "sandbox": prov},
		tools:     tools.NewRegistry(githubtools.Tools(gh)...),
		slack:     slack.New(cfg.SlackBotToken, slack.OptionHTTPClient(httpClient), slack.OptionAPIURL(cfg.SlackAPIURL)),
	}, nil
}

// dial connects one worker's own Temporal client; rpcs, when set, counts
// its calls, and m, when set, receives the SDK's metrics.
func (e *env) dial(identity string, rpcs *rpcCounter, m *metrics.Metrics) (client.Client, error) {
	o := client.Options{
		HostPort:  e.server.FrontendHostPort(),
		Namespace: "default",
		Identity:  identity,
		Logger:    tlog.NewStructuredLogger(e.logger),
	}
	if m != nil {
		o.MetricsHandler = m.TemporalHandler()
	}
	if rpcs != nil {
		o.ConnectionOptions.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.interceptor)}
	}
	return client.Dial(o)
}

// capstanOptions says how a capstan pool is built.
type capstanOptions struct {
	workers   int
	ledgerDSN string       // every worker opens its own store on it
	timer     *ledgerTimer // when set, every ledger call is timed
	rpcs      *rpcCounter  // when set, every call to the server is counted
	// breakers on or off (breakers.go); a worker's default is on, so every
	// pool but the outage's "off" run has them once they are built.
	breakers bool
	// sandbox the workers talk to; nil means the env's.
	sandbox *sandbox.Sandbox
}

// startCapstan starts a pool of capstan workers: AgentTask and the
// activities built with activities.New, wired as worker/worker.go wires
// them (the worker is package main; this mirrors its start function),
// with what a worker has on by default: its logger adding the task's ids,
// its metrics (capstan's and the SDK's, in a registry of its own; nothing
// scrapes them here) and its breakers.
func (e *env) startCapstan(ctx context.Context, queue string, o capstanOptions) (*pool, error) {
	p := &pool{queue: queue}
	for i := range o.workers {
		identity := fmt.Sprintf("capstan-bench@%s/%d", queue, i)
		logger := logids.Logger(e.logger)
		m, err := metrics.New(logger)
		if err != nil {
			p.stop()
			return nil, err
		}
		p.closers = append(p.closers, func() { _ = m.Close(context.Background()) })
		store, err := ledgerdsn.Open(ctx, o.ledgerDSN, ledgerdsn.Options{Logger: logger})
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("open the ledger: %w", err)
		}
		p.closers = append(p.closers, func() { _ = store.Close() })
		var led activities.Ledger = store
		if o.timer != nil {
			led = o.timer.wrap(store)
		}
		sb := o.sandbox
		if sb == nil {
			sb = e.sandbox
		}
		cl, err := e.newClients(sb, logger)
		if err != nil {
			p.stop()
			return nil, err
		}
		deps := activities.Deps{
			Ledger:      led,
			Providers:   cl.providers,
			Tools:       cl.tools,
			Slack:       cl.slack,
			Identity:    identity,
			Lease:       config.DefaultLease,
			Now:         time.Now,
			Logger:      logger,
			Metrics:     m,
			Reconcilers: reconcilers.NewSet(cl.tools, slackpost.NewMessages(cl.slack)),
		}
		if err := configureBreakers(&deps, o.breakers, m); err != nil {
			p.stop()
			return nil, err
		}
		acts, err := activities.New(deps)
		if err != nil {
			p.stop()
			return nil, err
		}
		c, err := e.dial(identity, o.rpcs, m)
		if err != nil {
			p.stop()
			return nil, err
		}
		p.closers = append(p.closers, c.Close)
		w := worker.New(c, queue, worker.Options{Identity: identity})
		w.RegisterWorkflow(workflows.AgentTask)
		w.RegisterActivity(acts)
		if err := w.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("start worker %s: %w", identity, err)
		}
		p.workers = append(p.workers, w)
	}
	return p, nil
}

// startBare starts a pool of workers that run BareTask, the same task shape
// without capstan (bare.go).
func (e *env) startBare(queue string, workers int, rpcs *rpcCounter) (*pool, error) {
	p := &pool{queue: queue}
	for i := range workers {
		identity := fmt.Sprintf("bare-bench@%s/%d", queue, i)
		cl, err := e.newClients(e.sandbox, e.logger)
		if err != nil {
			p.stop()
			return nil, err
		}
		c, err := e.dial(identity, rpcs, nil)
		if err != nil {
			p.stop()
			return nil, err
		}
		p.closers = append(p.closers, c.Close)
		w := worker.New(c, queue, worker.Options{Identity: identity})
		w.RegisterWorkflow(BareTask)
		w.RegisterActivity(&bareActivities{providers: cl.providers, tools: cl.tools, slack: cl.slack})
		if err := w.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("start worker %s: %w", identity, err)
		}
		p.workers = append(p.workers, w)
	}
	return p, nil
}
