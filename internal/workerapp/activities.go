package workerapp

import (
	"time"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
)

// newActivities builds the activities over the worker's ledger, clients and
// breakers, reporting to its metrics and live stream when it has them.
func (w *Worker) newActivities(cfg config.Config, cl Clients, breakers *breaker.Set) (*activities.Activities, error) {
	var led activities.Ledger = w.ledger
	if w.wrapLedger != nil {
		led = w.wrapLedger(led)
	}
	deps := activities.Deps{
		Ledger:    led,
		Providers: cl.Providers,
		Tools:     cl.Tools,
		// Read before a write is decided, once per repository.
		DefaultBranches: cl.DefaultBranches,
		// This worker's own policy: a floor no task's rules loosen.
		Floor:    w.floor,
		Identity: w.identity,
		Breakers: breakers,
		Lease:    cfg.Lease,
		// How long a task waits for this worker's ledger in one outage.
		LedgerOutageLimit: cfg.LedgerOutageLimit,
		// The limits a task leaves unset: see activities.WorkerLimits.
		ModelLimits: model.Limits(cfg.ModelLimits),
		Budget:      contract.Budget{MaxTokens: cfg.MaxTokensPerTask, MaxCostUSD: cfg.MaxCostPerTask},
		Prices:      cfg.ModelPrices,
		// The most of an MCP result the model is shown.
		MCPResultCap: cfg.MCPResultCap,
		// Transcript items kept in memory; CAPSTAN_ITEM_CACHE_BYTES=0 keeps none.
		ItemCacheBytes: itemCacheBytes(cfg.ItemCacheBytes),
		Now:            time.Now,
		Logger:         w.logger,
		Redactor:       w.redactor,
		TraceContent:   cfg.TraceContent,
	}
	// Interfaces, not a *slack.Client, so that "no token" stays a nil
	// interface the activities and reconcilers can test for.
	var slackHistory slackpost.History
	if cl.Slack != nil {
		deps.Slack, slackHistory = cl.Slack, cl.Slack
	}
	// Each tool's own lookup finds its effects again, and the deliveries'
	// finds posted messages.
	deps.Reconcilers = reconcilers.NewSet(cl.Tools, slackpost.NewMessages(slackHistory))
	if w.metrics != nil {
		deps.Metrics = w.metrics
	}
	if w.liveHub != nil {
		deps.Live = w.liveHub
	}
	return activities.New(deps)
}
