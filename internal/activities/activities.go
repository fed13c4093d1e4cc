// Package activities holds capstan's Temporal activities: ModelTurn streams
// one model attempt, ExecuteTool performs one operation under the ledger's
// claim, Deliver posts a task's final answer, and Reconcile finds out what
// became of an operation whose outcome is unknown. Activities are methods on
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
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/redact"
	"github.com/capstanhq/capstan/tool"
)

// Ledger is what the activities need of the ledger.
type Ledger interface {
	Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error)
	MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error
	Renew(ctx context.Context, id string, fence int64, lease time.Duration) error
	Complete(ctx context.Context, c ledger.Completion) error
	Release(ctx context.Context, id string, fence int64) error
	TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (ledger.Operation, error)
	Get(ctx context.Context, id string) (ledger.Operation, error)
	ListByTask(ctx context.Context, taskID string) ([]ledger.Operation, error)
	PutItem(ctx context.Context, data []byte) (string, error)
	GetItem(ctx context.Context, ref string) ([]byte, error)
	GetItems(ctx context.Context, refs []string) ([][]byte, error)
	CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error)
	GetTurn(ctx context.Context, turnID string) ([]byte, error)
	RecordDecision(ctx context.Context, d ledger.Decision) (ledger.Decision, bool, error)
}

// BranchReader names a repository's ("owner/name") default branch;
// "" when it is not known.
type BranchReader interface {
	DefaultBranch(ctx context.Context, repo string) (string, error)
}

// SlackPoster posts a message; *slack.Client satisfies it.
type SlackPoster interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
}

// Deps are the dependencies of every activity. New checks them and fixes
// their defaults once.
type Deps struct {
	Ledger    Ledger                    // required
	Tools     *tool.Registry            // required
	Providers map[string]model.Provider // by provider name: "openai", "sandbox"
	// Slack may be nil: a delivery to Slack then fails as worker_misconfigured.
	Slack SlackPoster
	// Reconcilers find out what became of an operation whose outcome is
	// unknown, through the lookup of the tool or delivery that made it
	// (reconcilers.NewSet over Tools and the deliveries). Nil: Reconcile
	// can only record a person's verdict, and otherwise fails as
	// worker_misconfigured.
	Reconcilers *reconcilers.Set
	// DefaultBranches reads a repository's default branch
	// (githubtools.RepoBranches, cached per worker), which the policy's
	// default/base-branch rule guards like the task's base branch. Nil:
	// the default branch is not known, and the rule guards the base alone.
	DefaultBranches BranchReader
	// Floor is this worker's own policy file (CAPSTAN_POLICY), decided on
	// its own beside the defaults and each task's recorded rules
	// (policy.Stack): a deny of any layer wins, so a task's rules never
	// loosen it, and only its override rules loosen a default. Nil: the
	// defaults and the task's rules alone.
	Floor *policy.Policy
	// Identity names this worker in lease owners. Required.
	Identity string
	// Breakers guard every call to a model provider, GitHub and Slack
	// (docs/design.md §7): while a dependency's breaker is open nothing is
	// sent to it. Nil: no breakers, every call is sent.
	Breakers *breaker.Set
	// LedgerOutageLimit is how long a task may wait, in one outage, for a
	// ledger it cannot reach before it fails ledger_unavailable
	// (CAPSTAN_LEDGER_OUTAGE_LIMIT); the activities tell the workflow with
	// every wait. Zero means config.DefaultLedgerOutageLimit.
	LedgerOutageLimit time.Duration
	// Lease is how long a claim stays live; zero means config.DefaultLease.
	Lease time.Duration
	// ModelLimits are the worker's defaults for the limits a task leaves
	// unset (WorkerLimits); zero fields mean config.DefaultModelLimits.
	ModelLimits model.Limits
	// Budget is the worker's budget for a task that sets none, and Prices
	// its price table by provider:model (WorkerLimits); a zero token
	// budget means config.DefaultMaxTokensPerTask, nil prices
	// config.DefaultModelPrices.
	Budget contract.Budget
	Prices map[string]config.Price
	// MCPResultCap is the most bytes of an MCP tool's result the model is
	// shown (CAPSTAN_MCP_RESULT_CAP); a larger one is kept whole as a
	// transcript item (mcp_result.go). Zero means
	// config.DefaultMCPResultCap.
	MCPResultCap int
	// ItemCacheBytes bounds the transcript items this worker keeps in
	// memory (itemCache, CAPSTAN_ITEM_CACHE_BYTES). Zero means
	// config.DefaultItemCacheBytes; below zero keeps none.
	ItemCacheBytes int
	Now            func() time.Time // default time.Now
	Logger         *slog.Logger     // default slog.Default()
	// Random draws the jitter of retry delays, uniform in [0,1); default
	// math/rand/v2.Float64.
	Random func() float64
	// Redactor masks the worker's secrets in what the activities write to
	// the ledger's error column (redact.go); the boundary masks what they
	// hand Temporal (RedactingInterceptor, NewHandOff). Nil masks nothing.
	Redactor *redact.Redactor
	// TraceContent (CAPSTAN_TRACE_CONTENT) lets the activities' spans
	// carry content, masked by Redactor (spans.go); false keeps them to
	// ids, names, counts and outcomes.
	TraceContent bool

	// Live receives each model attempt's text as it streams, for
	// followers (livestream.go); nil publishes nothing.
	Live LiveStream

	// Metrics counts attempts, retries, operations, verdicts and
	// deliveries (observe.go); nil counts nothing.
	Metrics Metrics
}

// Activities carries the dependencies of every activity. Build it with New;
// the workflow names activities through a nil *Activities.
type Activities struct {
	deps
	// policies are the tasks' compiled policies by the hash of their text
	// (policy.go).
	policies sync.Map
}

type deps = Deps

// ErrMissingDependency is wrapped by New's error for a required dependency
// that is nil or empty.
var ErrMissingDependency = errors.New("missing activity dependency")

// New returns the activities over d, or an error naming the first required
// dependency that is missing.
func New(d Deps) (*Activities, error) {
	switch {
	case d.Ledger == nil:
		return nil, fmt.Errorf("%w: Ledger", ErrMissingDependency)
	case d.Tools == nil:
		return nil, fmt.Errorf("%w: Tools", ErrMissingDependency)
	case d.Identity == "":
		return nil, fmt.Errorf("%w: Identity", ErrMissingDependency)
	}
	if err := d.Floor.CheckTools(d.Tools.Names()); err != nil {
		return nil, fmt.Errorf("CAPSTAN_POLICY: %w", err)
	}
	if d.Providers == nil {
		d.Providers = map[string]model.Provider{}
	}
	if d.Lease <= 0 {
		d.Lease = config.DefaultLease
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = logids.Logger(d.Logger)
	if d.Metrics == nil {
		d.Metrics = noMetrics{}
	}
	// Every ledger call goes through the ledger's breaker, and is counted;
	// an item this worker stored or read is read from memory (itemCache).
	if d.ItemCacheBytes == 0 {
		d.ItemCacheBytes = config.DefaultItemCacheBytes
	}
	d.Ledger = newItemCache(&countingLedger{Ledger: &guardedLedger{Ledger: redactingLedger(d.Ledger, d.Redactor), breakers: d.Breakers},
		metrics: d.Metrics, logger: d.Logger}, d.ItemCacheBytes)
	if d.Random == nil {
		d.Random = rand.Float64
	}
	return &Activities{deps: d}, nil
}
