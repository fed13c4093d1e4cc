// Package openai is capstan's model.Provider for OpenAI-compatible Chat
// Completions streaming (OpenAI itself, and vLLM, Ollama, DeepSeek, Qwen, …
// through a base URL), built on the official openai-go SDK (docs/design.md §4.5).
//
// Guarantees:
//   - One Stream call is exactly one HTTP request: the SDK's own retries are
//     off, because the workflow's turn guard owns retries and must see, and
//     journal, every attempt.
//   - The configuration comes only from Config. The SDK's environment defaults
//     (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS, …)
//     are never read here; the caller reads OPENAI_BASE_URL into Config.
//   - Every failure is a *model.AttemptError carrying the outcome class, the
//     furthest transport phase (recorded with httptrace, docs/design.md §4.1), the HTTP
//     status if headers arrived, the provider's own message and any retry
//     delay it asked for.
//   - The API key never appears in an error or a log line.
package openai

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
)

// Config configures a Provider.
type Config struct {
	// BaseURL of the API, e.g. "http://localhost:11434/v1". Empty means the
	// SDK's default (api.openai.com).
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends no Authorization header,
	// which local servers such as Ollama accept.
	APIKey string
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

// Provider streams chat completions. It is safe for concurrent use; each
// Stream call is an independent attempt.
type Provider struct {
	chat   openai.ChatService
	key    string
	logger *slog.Logger
}

var _ model.Provider = (*Provider)(nil)

// New returns a Provider for cfg.
func New(cfg Config) *Provider {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = config.DefaultConnectTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = model.NewHTTPClient(cfg.ConnectTimeout)
	} else if hc.Timeout != 0 {
		logger.Warn("openai: the configured HTTP client has an overall timeout, which cuts long streams",
			"timeout", hc.Timeout)
	}

	// openai.NewClient would start from DefaultClientOptions, which read
	// OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID and
	// OPENAI_CUSTOM_HEADERS from the environment: with an empty Config.BaseURL
	// it would silently follow OPENAI_BASE_URL, and it would add headers capstan
	// never configured. Building the chat service from an explicit option list
	// keeps Config the only source. WithEnvironmentProduction supplies the
	// default base URL, which WithBaseURL overrides when set.
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
	return &Provider{chat: openai.NewChatService(opts...), key: cfg.APIKey, logger: logger}
}

// Name implements model.Provider.
func (p *Provider) Name() string { return "openai" }

// Stream implements model.Provider. It returns once the response headers
// arrived (or the request failed), without waiting for the first event, so
// HTTP errors surface here rather than on the first Recv.
func (p *Provider) Stream(ctx context.Context, req model.Request) (model.Stream, error) {
	params := newParams(req)
	ctx, cancel := context.WithCancelCause(ctx)
	rec := req.Recorder
	if rec == nil {
		rec = new(model.PhaseRecorder)
	}
	s := &stream{provider: p, ctx: ctx, cancel: cancel, rec: rec}
	var resp *http.Response

	p.logger.DebugContext(ctx, "openai: attempt starting", "model", req.Model,
		"messages", len(req.Messages), "tools", len(req.Tools))

	// NewStreaming performs the request synchronously, up to the response
	// headers, and parks any failure in the returned stream. Err() exposes it
	// before the first Next, so nothing of the body is consumed here and a
	// slow first token still counts against the first-event watchdog, not
	// against Stream. WithResponseInto keeps the response even when the SDK
	// cannot decode the error body (an HTML 502 from a proxy), so the status
	// is never lost.
	s.sdk = p.chat.Completions.NewStreaming(model.TraceContext(ctx, s.rec), params,
		option.WithResponseInto(&resp))
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
	p.logger.DebugContext(ctx, "openai: attempt failed", "outcome", ae.Outcome, "phase", ae.Phase,
		"status", ae.HTTPStatus, "retry_after", ae.RetryAfter, "message", ae.Message)
}

// newParams maps a provider-neutral request onto Chat Completions parameters.
func newParams(req model.Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(req.Model),
		Messages: make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages)),
		// The final chunk then reports token usage for the whole request.
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, m := range req.Messages {
		params.Messages = append(params.Messages, newMessage(m))
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params
}

func newMessage(m model.Message) openai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case model.RoleSystem:
		return openai.SystemMessage(m.Content)
	case model.RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Content)
		}
		for _, c := range m.ToolCalls {
			args := string(c.Arguments)
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       c.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
	case model.RoleTool:
		return openai.ToolMessage(m.Content, m.ToolCallID)
	default:
		return openai.UserMessage(m.Content)
	}
}
