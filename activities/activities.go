// Package activities holds capstan's Temporal activities: ModelTurn streams
// one model attempt, ExecuteTool performs one operation under the ledger's
// claim, and Deliver posts a task's final answer. Activities are methods on
// Activities, whose fields are their dependencies; the workflow calls them
// through a nil *Activities.
//
// Activities convert errors to Temporal application errors here, at the
// boundary, and nowhere else. Secrets (API keys, tokens) live in the
// dependencies built by the worker from its environment and never appear in
// inputs, results, heartbeats or errors.
package activities

import (
	"context"
	"log/slog"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools"
)

// Ledger is what the activities need of the ledger.
type Ledger interface {
	Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error)
	MarkRunning(ctx context.Context, id string, fence int64) error
	Complete(ctx context.Context, c ledger.Completion) error
	Release(ctx context.Context, id string, fence int64) error
	PutItem(ctx context.Context, data []byte) (string, error)
	GetItem(ctx context.Context, ref string) ([]byte, error)
}

// SlackPoster posts a message; *slack.Client satisfies it.
type SlackPoster interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
}

// ModelLimits are the per-attempt watchdogs of DESIGN §4.2.
type ModelLimits struct {
	// FirstEvent bounds the wait for the first stream event; zero means Idle.
	FirstEvent time.Duration
	// Idle bounds the silence between two stream events.
	Idle time.Duration
	// Total bounds the whole attempt.
	Total time.Duration
	// Heartbeat is the interval of the worker-liveness heartbeat, sent
	// whether or not the stream moves.
	Heartbeat time.Duration
}

// DefaultModelLimits are the design's defaults: a silent model is cut after
// 120 s, an attempt after 10 min; the worker heartbeats every 10 s against a
// 30 s heartbeat timeout.
var DefaultModelLimits = ModelLimits{Idle: 120 * time.Second, Total: 10 * time.Minute, Heartbeat: 10 * time.Second}

// Activities carries the dependencies of every activity.
type Activities struct {
	Ledger    Ledger
	Providers map[string]model.Provider // by provider name: "openai", "sandbox"
	Tools     *tools.Registry
	Slack     SlackPoster
	// Identity names this worker in lease owners.
	Identity string
	Limits   ModelLimits
	// Lease is how long a claim stays live. Leases are not renewed yet, so
	// it must outlast the longest tool or delivery call (2 min).
	Lease  time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Activities) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

func (a *Activities) lease() time.Duration {
	if a.Lease > 0 {
		return a.Lease
	}
	return 3 * time.Minute
}

func (a *Activities) limits() ModelLimits {
	l := a.Limits
	d := DefaultModelLimits
	if l.Idle <= 0 {
		l.Idle = d.Idle
	}
	if l.FirstEvent <= 0 {
		l.FirstEvent = l.Idle
	}
	if l.Total <= 0 {
		l.Total = d.Total
	}
	if l.Heartbeat <= 0 {
		l.Heartbeat = d.Heartbeat
	}
	return l
}
