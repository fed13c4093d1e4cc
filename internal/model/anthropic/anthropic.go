// Package anthropic is capstan's model.Provider for Anthropic Messages
// streaming, built on the official anthropic-sdk-go (docs/design.md §4.5).
//
// Guarantees:
//   - One Stream call is exactly one HTTP request: the SDK's own retries are
//     off, because the workflow's turn guard owns retries and must see, and
//     journal, every attempt.
//   - The configuration comes only from Config. The SDK's environment defaults
//     (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL,
//     ANTHROPIC_PROFILE, ANTHROPIC_CUSTOM_HEADERS, federation variables, …) are
//     never read here; the caller reads ANTHROPIC_API_KEY and
//     ANTHROPIC_BASE_URL into Config.
//   - The stream maps onto the same model events as the OpenAI provider's:
//     text deltas, tool-call deltas (a tool_use block's id and name, then its
//     input_json_delta fragments), one finish reason in OpenAI's vocabulary
//     (stop, tool_calls, length, content_filter) and one usage event, both
//     delivered at message_stop, so a stream cut before its end never shows a
//     finish.
//   - Every failure is a *model.AttemptError carrying the outcome class, the
//     furthest transport phase (recorded with httptrace, docs/design.md §4.1),
//     the HTTP status if headers arrived, the provider's own message and any
//     retry delay it asked for. An `error` event inside a 200 stream is
//     classified by its error type, never by the status.
//   - The API key never appears in an error or a log line.
package anthropic

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
)

// Config configures a Provider.
type Config struct {
	// BaseURL of the API, e.g. "http://127.0.0.1:8080/" (the SDK appends
	// "v1/messages"). Empty means the SDK's default (api.anthropic.com).
	BaseURL string
	// APIKey is the credential. Empty sends none, which only a local
	// server accepts.
	APIKey string
	// MaxTokens is the max_tokens of every request. Default config.DefaultAnthropicMaxTokens.
	MaxTokens int64
	// HTTPClient, when set, is used as is; it must not set Timeout, which
	// would cut long streams. When nil, the provider builds its own client
	// with ConnectTimeout and no overall timeout: the activity's watchdogs
	// bound each attempt, and tell why they cut it.
	HTTPClient *http.Client
	// ConnectTimeout bounds dialling and the TLS handshake. Default 10s.
	ConnectTimeout time.Duration
	// Logger receives debug lines about attempts. Default: discard.
	Logger *slog.Logger
}

// Provider streams Messages. It is safe for concurrent use; each Stream call
// is an independent attempt.
type Provider struct {
	messages  anthropic.MessageService
	key       string
	maxTokens int64
	logger    *slog.Logger
}

var _ model.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) *Provider {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = config.DefaultConnectTimeout
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = config.DefaultAnthropicMaxTokens
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = model.NewHTTPClient(cfg.ConnectTimeout)
	} else if hc.Timeout != 0 {
		logger.Warn("anthropic: the configured HTTP client has an overall timeout, which cuts long streams",
			"timeout", hc.Timeout)
	}

	// anthropic.NewClient would start from DefaultClientOptions, which walk a
	// credential chain (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, profiles,
	// federation) and read ANTHROPIC_BASE_URL and ANTHROPIC_CUSTOM_HEADERS:
	// with an empty Config.BaseURL it would silently follow the environment,
	// and it would add headers capstan never configured. Building the message
	// service from an explicit option list keeps Config the only source.
	// WithEnvironmentProduction supplies the default base URL, which
	// WithBaseURL overrides when set.
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Provider{messages: anthropic.NewMessageService(opts...), key: cfg.APIKey,
		maxTokens: cfg.MaxTokens, logger: logger}
}

// Name implements model.Provider.
func (p *Provider) Name() string { return "anthropic" }

// Stream implements model.Provider. It returns once the response headers
// arrived (or the request failed), without waiting for the first event, so
// HTTP errors surface here rather than on the first Recv.
func (p *Provider) Stream(ctx context.Context, req model.Request) (model.Stream, error) {
	params := newParams(req, p.maxTokens)
	ctx, cancel := context.WithCancelCause(ctx)
	rec := req.Recorder
	if rec == nil {
		rec = new(model.PhaseRecorder)
	}
	s := &stream{provider: p, ctx: ctx, cancel: cancel, rec: rec}
	var resp *http.Response

	p.logger.DebugContext(ctx, "anthropic: attempt starting", "model", req.Model,
		"messages", len(req.Messages), "tools", len(req.Tools))

	// NewStreaming performs the request synchronously, up to the response
	// headers, and parks any failure in the returned stream. Err() exposes it
	// before the first Next, so nothing of the body is consumed here and a
	// slow first event still counts against the first-event watchdog, not
	// against Stream. WithResponseInto keeps the response even when the
	// request failed, so the status and Retry-After headers are never lost.
	s.sdk = p.messages.NewStreaming(model.TraceContext(ctx, s.rec), params, option.WithResponseInto(&resp))
	if err := s.sdk.Err(); err != nil {
		_ = s.sdk.Close()
		ae := p.classifyRequestError(ctx, s.rec, resp, err)
		cancel(ae)
		p.logFailure(ctx, ae)
		return nil, ae
	}
	// A response arrived. GotFirstResponseByte has normally advanced the phase
	// already; transports that skip httptrace hooks must not leave it behind.
	s.rec.Advance(model.PhaseHeadersReceived)
	if resp != nil {
		s.status = resp.StatusCode
	}
	return s, nil
}

func (p *Provider) logFailure(ctx context.Context, ae *model.AttemptError) {
	p.logger.DebugContext(ctx, "anthropic: attempt failed", "outcome", ae.Outcome, "phase", ae.Phase,
		"status", ae.HTTPStatus, "retry_after", ae.RetryAfter, "message", ae.Message)
}
