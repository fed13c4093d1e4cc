package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/slack-go/slack"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/reconcilers"
	"github.com/capstanhq/capstan/workflows"
)

// sandboxToken is what a --sandbox worker sends when the environment has no
// token; the fakes accept any. It must not be a word that appears in
// ordinary messages, since providers redact their key from error text.
const sandboxToken = "capstan-sandbox-token-not-a-secret"

// process is a started worker and what it must close.
type process struct {
	client        client.Client
	worker        worker.Worker
	ledger        ledger.Store
	sandbox       *sandbox.Sandbox
	metrics       *metrics.Metrics // nil when CAPSTAN_METRICS_ADDR is empty
	metricsServer *metrics.Server
	liveHub       *livestream.Hub // nil when CAPSTAN_STREAM_ADDR is empty
	liveServer    *livestream.Server
	logger        *slog.Logger
}

// start checks the configuration and connects everything, failing with one
// sentence on the first problem: a missing key, a bad ledger DSN, a metrics
// address it cannot listen on, an unreachable server.
func start(ctx context.Context, o options, lookupEnv func(string) (string, bool), logger *slog.Logger, stdout io.Writer) (_ *process, err error) {
	cfg := config.FromLookupEnv(lookupEnv)
	logger = logids.Logger(logger) // lines logged with an activity's context carry its ids
	p := &process{logger: logger}
	defer func() {
		if err != nil {
			p.close()
		}
	}()

	if o.sandbox {
		sb, err := sandbox.Start(sandbox.Options{})
		if err != nil {
			return nil, fmt.Errorf("start the sandbox: %w", err)
		}
		p.sandbox = sb
		if err := cfg.UseSandbox(sb.ModelURL, sb.GitHubURL, sb.SlackURL, sandboxToken); err != nil {
			return nil, err
		}
		fmt.Fprintf(stdout, "sandbox: model %s  github %s  slack %s\n", sb.ModelURL, sb.GitHubURL, sb.SlackURL)
		logger.Info("sandbox started", "model_url", sb.ModelURL, "github_url", sb.GitHubURL, "slack_url", sb.SlackURL)
	}
	if err := cfg.ValidateWorker(); err != nil {
		return nil, err
	}
	if err := p.serveMetrics(cfg.MetricsAddr, stdout); err != nil {
		return nil, err
	}
	if ls, err := config.LiveStreamFromLookupEnv(lookupEnv); err != nil {
		return nil, err
	} else if err := p.serveLive(ls, stdout); err != nil {
		return nil, err
	}

	dsn := cfg.LedgerDSN
	p.ledger, err = ledgerdsn.Open(ctx, dsn, ledgerdsn.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("open the ledger (CAPSTAN_LEDGER_DSN): %w", err)
	}

	httpClient := &http.Client{Timeout: time.Minute}
	gh, err := githubtools.NewClient(cfg.GitHubAPIURL, cfg.GitHubToken, httpClient)
	if err != nil {
		return nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	// Interfaces, not a *slack.Client, so that "no token" stays a nil
	// interface the activities and reconcilers can test for.
	var slackClient activities.SlackPoster
	var slackHistory slackpost.History
	if cfg.SlackBotToken != "" {
		sc := slack.New(cfg.SlackBotToken, slack.OptionHTTPClient(httpClient), slack.OptionAPIURL(cfg.SlackAPIURL))
		slackClient, slackHistory = sc, sc
	} else {
		logger.Warn("SLACK_BOT_TOKEN is not set: tasks with a Slack channel will fail at delivery")
	}
	providers := modelProviders(cfg, p.sandbox != nil, logger)

	// One breaker per dependency and operation class, for this worker
	// (docs/design.md §7); transitions are logged and counted.
	var breakers *breaker.Set
	bopts := breaker.Options{Logger: logger}
	if p.metrics != nil {
		bopts.OnStateChange = func(t breaker.Transition) {
			p.metrics.BreakerTransition(string(t.Key), string(t.From), string(t.To))
		}
	}
	if cfg.BreakersOff {
		logger.Warn("CAPSTAN_BREAKERS=off: every call is sent, whatever the state of its dependency")
	} else if breakers, err = breaker.NewSet(cfg.Breakers, bopts); err != nil {
		return nil, fmt.Errorf("CAPSTAN_BREAKER_*: %w", err)
	} else if p.metrics != nil {
		// Every breaker this worker can use shows its state from the start,
		// not from its first transition.
		known := []breaker.Key{breaker.GitHubRead, breaker.GitHubWrite, breaker.SlackPost}
		for _, name := range keys(providers) {
			known = append(known, breaker.Model(name))
		}
		for _, k := range known {
			p.metrics.BreakerTransition(string(k), "", string(breakers.State(k)))
		}
	}

	identity := newIdentity()
	var copts client.Options
	var sdkMetrics client.MetricsHandler
	if p.metrics != nil {
		sdkMetrics = p.metrics.TemporalHandler()
	}
	p.client, copts, err = config.DialTemporal(ctx, identity, tlog.NewStructuredLogger(logger), sdkMetrics, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := ensureSearchAttributes(ctx, p.client, copts.Namespace, logger); err != nil {
		return nil, err
	}

	// On SIGTERM the worker stops polling and gives running activities
	// o.stopTimeout to finish before their contexts are cancelled.
	p.worker = worker.New(p.client, cfg.TaskQueue, worker.Options{Identity: identity, WorkerStopTimeout: o.stopTimeout})
	p.worker.RegisterWorkflow(workflows.AgentTask)
	registry := tools.NewRegistry(githubtools.Tools(gh)...)
	deps := activities.Deps{
		Ledger:    p.ledger,
		Providers: providers,
		Tools:     registry,
		Slack:     slackClient,
		Identity:  identity,
		Breakers:  breakers,
		Lease:     cfg.Lease,
		// The limits a task leaves unset: see activities.WorkerLimits.
		ModelLimits: model.Limits(cfg.ModelLimits),
		Now:         time.Now,
		Logger:      logger,

		Reconcilers: reconcilers.NewSet(registry, slackpost.NewMessages(slackHistory)),
	}
	if p.metrics != nil {
		deps.Metrics = p.metrics
	}
	if p.liveHub != nil {
		deps.Live = p.liveHub
	}
	acts, err := activities.New(deps)
	if err != nil {
		return nil, err
	}
	p.worker.RegisterActivity(acts)
	logger.Info("worker ready", "identity", identity, "task_queue", cfg.TaskQueue, "ledger", ledgerdsn.Redact(dsn))
	fmt.Fprintf(stdout, "worker %s polling task queue %q\n", identity, cfg.TaskQueue)
	return p, nil
}

// run polls until ctx is cancelled (SIGINT/SIGTERM), then stops gracefully.
func (p *process) run(ctx context.Context) error {
	stopped := make(chan any)
	go func() {
		<-ctx.Done()
		close(stopped)
	}()
	if err := p.worker.Run(stopped); err != nil {
		return fmt.Errorf("worker stopped: %w", err)
	}
	p.logger.Info("worker stopped")
	return nil
}

func (p *process) close() {
	if p.client != nil {
		p.client.Close()
	}
	if p.metricsServer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = p.metricsServer.Close(ctx)
		_ = p.metrics.Close(ctx)
		cancel()
	}
	if p.liveServer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = p.liveServer.Close(ctx)
		cancel()
	}
	if p.ledger != nil {
		_ = p.ledger.Close()
	}
	if p.sandbox != nil {
		_ = p.sandbox.Close()
	}
}

// serveMetrics starts the Prometheus endpoint on addr, unless addr is empty.
// A taken port or an unknown host fails the start, naming the variable.
func (p *process) serveMetrics(addr string, stdout io.Writer) error {
	if addr == "" {
		p.logger.Info("metrics are off (CAPSTAN_METRICS_ADDR is empty)")
		return nil
	}
	m, err := metrics.New(p.logger)
	if err != nil {
		return err
	}
	srv, err := m.Serve(addr, p.logger)
	if err != nil {
		_ = m.Close(context.Background())
		return fmt.Errorf("serve metrics on CAPSTAN_METRICS_ADDR=%q: %w", addr, err)
	}
	p.metrics, p.metricsServer = m, srv
	p.logger.Info("metrics served", "url", srv.URL())
	fmt.Fprintf(stdout, "metrics: %s\n", srv.URL())
	return nil
}

// ensureSearchAttributes registers the attributes AgentTask sets that the
// namespace lacks, so a task never fails on an unknown attribute. Workers of
// a pool start together: an attribute a peer registered first is success.
func ensureSearchAttributes(ctx context.Context, c client.Client, ns string, logger *slog.Logger) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", ns, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, key := range workflows.SearchAttributes {
		if _, ok := list.GetCustomAttributes()[key.GetName()]; !ok {
			missing[key.GetName()] = key.GetValueType()
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if errors.As(err, &exists) || (err != nil && registered(ctx, c, ns, missing)) {
		// A peer worker registered them first (the server reports the
		// race as AlreadyExists or as a retryable error): that is success.
		logger.Info("search attributes registered by a peer", "names", keys(missing))
		return nil
	}
	if err != nil {
		return fmt.Errorf("register search attributes %v in namespace %s (register them with `temporal operator search-attribute create`): %w", keys(missing), ns, err)
	}
	logger.Info("registered search attributes", "names", keys(missing))
	return nil
}

// registered reports whether the namespace now has every attribute in want.
func registered(ctx context.Context, c client.Client, ns string, want map[string]enumspb.IndexedValueType) bool {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return false
	}
	for name := range want {
		if _, ok := list.GetCustomAttributes()[name]; !ok {
			return false
		}
	}
	return true
}

func newIdentity() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("capstan-worker@%s/%d/%s", config.Hostname(), os.Getpid(), hex.EncodeToString(b))
}
