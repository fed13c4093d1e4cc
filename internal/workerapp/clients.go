package workerapp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	gogithub "github.com/google/go-github/v62/github"
	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/calltimeout"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ghapp"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/anthropic"
	"github.com/capstanhq/capstan/internal/model/openai"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	captrace "github.com/capstanhq/capstan/internal/trace"
	"github.com/capstanhq/capstan/tool"
)

// Clients are a worker's clients of the outside world, built from its
// configuration alone: the model providers, the tools (over GitHub; each
// also finds its effects again for the reconcilers) and Slack.
type Clients struct {
	// Providers are the model providers the worker serves, by the provider
	// part of "provider:model".
	Providers map[string]model.Provider
	// Tools are the tools the model may call, over GitHub.
	Tools *tool.Registry
	// DefaultBranches reads repositories' default branches, once each.
	DefaultBranches *githubtools.RepoBranches
	// Slack is nil when SLACK_BOT_TOKEN is not set.
	Slack *slack.Client
	// GitHubApp holds the installation tokens when the worker acts as a
	// GitHub App (CAPSTAN_GITHUB_APP_ID); nil with a GITHUB_TOKEN.
	GitHubApp *ghapp.Source
}

// githubClient is the worker's one go-github client, whose calls go
// through timeouts, and the account capstan writes as: authenticated with
// GITHUB_TOKEN, whose user GET /user names; or, for a GitHub App, with
// installation tokens its Source puts on each request, the App's bot login
// being the account whose markers lookups believe.
func githubClient(cfg config.Config, timeouts *calltimeout.Transport) (*gogithub.Client, githubtools.Self, *ghapp.Source, error) {
	if !cfg.GitHubApp.Set() {
		gh, err := githubtools.NewClient(cfg.GitHubAPIURL, cfg.GitHubToken, &http.Client{Transport: captrace.HTTPTransport(timeouts)})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("GITHUB_API_URL: %w", err)
		}
		return gh, githubtools.AuthenticatedUser(gh), nil, nil
	}
	key, err := cfg.GitHubApp.Key()
	if err != nil {
		return nil, nil, nil, err
	}
	src, err := ghapp.New(ghapp.Config{AppID: cfg.GitHubApp.ID, Key: key, InstallationID: cfg.GitHubApp.InstallationID,
		BaseURL: cfg.GitHubAPIURL, Base: timeouts})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	gh, err := githubtools.NewClient(cfg.GitHubAPIURL, "", &http.Client{Transport: captrace.HTTPTransport(src.Transport(timeouts))})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	return gh, src, src, nil
}

// CheckGitHubApp makes sure, at startup, that the worker can act as its
// GitHub App: GitHub takes the App's JWT (GET /app, which also names its
// bot) and, with a configured installation, knows it as the App's and not
// suspended (no token is requested: tokens are each requested for the
// repository a call acts on). A wrong id, key or installation is one
// sentence here instead of a failure in the middle of a task. Without an
// App it does nothing.
func (cl Clients) CheckGitHubApp(ctx context.Context) error {
	if cl.GitHubApp == nil {
		return nil
	}
	if _, err := cl.GitHubApp.Login(ctx); err != nil {
		return fmt.Errorf("act as the GitHub App (check CAPSTAN_GITHUB_APP_ID and its private key): %w", err)
	}
	if id := cl.GitHubApp.InstallationID(); id != 0 {
		if err := cl.GitHubApp.CheckInstallation(ctx, id); err != nil {
			return fmt.Errorf("act as the GitHub App's installation (check CAPSTAN_GITHUB_APP_INSTALLATION_ID): %w", err)
		}
	}
	return nil
}

// NewClients builds the clients of cfg. It fails only on a GitHub API URL
// go-github cannot use or a GitHub App private key it cannot read; it
// calls nothing (CheckGitHubApp does).
func NewClients(cfg config.Config, logger *slog.Logger) (Clients, error) {
	// Each call to GitHub or Slack is bounded by its kind's timeout (a
	// write's a little past GitHub's own ten seconds). Model providers
	// stream and have watchdogs of their own instead.
	ghTimeouts := &calltimeout.Transport{Read: cfg.GitHubTimeouts.Read, Write: cfg.GitHubTimeouts.Write}
	gh, self, app, err := githubClient(cfg, ghTimeouts)
	if err != nil {
		return Clients{}, err
	}
	cl := Clients{
		Providers: modelProviders(cfg, logger),
		Tools:     tool.NewRegistry(githubtools.ToolsAs(gh, self)...),
		// The policy's default/base-branch rule guards each repository's
		// default branch too (docs/design.md §5.8).
		DefaultBranches: githubtools.NewRepoBranches(gh),
		GitHubApp:       app,
	}
	if cfg.SlackBotToken != "" {
		cl.Slack = slack.New(cfg.SlackBotToken, slack.OptionHTTPClient(&http.Client{Transport: captrace.HTTPTransport(&calltimeout.Transport{
			Read: cfg.SlackTimeouts.Read, Write: cfg.SlackTimeouts.Write, IsWrite: calltimeout.SlackWrites})}), slack.OptionAPIURL(cfg.SlackAPIURL))
	} else {
		logger.Warn("SLACK_BOT_TOKEN is not set: tasks with a Slack channel will fail at delivery")
	}
	return cl, nil
}

// modelProviders returns the model providers a worker serves, by the
// provider part of "provider:model": each provider whose key the
// configuration holds. ValidateWorker has made sure there is at least one.
// A provider without a key is not registered: a task naming it fails on
// this worker with a worker-configuration error, which the startup warning
// announces. The keys go only into the providers' HTTP clients, never into
// a workflow input.
func modelProviders(cfg config.Config, logger *slog.Logger) map[string]model.Provider {
	providers := make(map[string]model.Provider)
	if cfg.OpenAIAPIKey != "" {
		providers["openai"] = openai.New(openai.Config{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey,
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger, HTTPClient: tracedModelClient(cfg)})
	}
	if cfg.AnthropicAPIKey != "" {
		providers["anthropic"] = anthropic.New(anthropic.Config{BaseURL: cfg.AnthropicBaseURL, APIKey: cfg.AnthropicAPIKey,
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger, HTTPClient: tracedModelClient(cfg)})
	}
	for _, name := range sortedKeys(config.ProviderKeys) {
		if _, ok := providers[name]; !ok {
			logger.Warn(config.ProviderKeys[name]+" is not set: tasks with a "+name+":<model> model fail on this worker",
				"provider", name)
		}
	}
	return providers
}

// tracedModelClient is the HTTP client a model provider would build for
// itself (model.NewHTTPClient), traced, when this process exports traces;
// nil otherwise, for the provider to build its own.
func tracedModelClient(cfg config.Config) *http.Client {
	if !captrace.Active() {
		return nil
	}
	hc := model.NewHTTPClient(cfg.ModelConnectTimeout)
	hc.Transport = captrace.HTTPTransport(hc.Transport)
	return hc
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
