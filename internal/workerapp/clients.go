package workerapp

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/calltimeout"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/anthropic"
	"github.com/capstanhq/capstan/internal/model/openai"
	"github.com/capstanhq/capstan/internal/tools"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// Clients are a worker's clients of the outside world, built from its
// configuration alone: the model providers, the tools (over GitHub; each
// also finds its effects again for the reconcilers) and Slack.
type Clients struct {
	// Providers are the model providers the worker serves, by the provider
	// part of "provider:model".
	Providers map[string]model.Provider
	// Tools are the tools the model may call, over GitHub.
	Tools *tools.Registry
	// DefaultBranches reads repositories' default branches, once each.
	DefaultBranches *githubtools.RepoBranches
	// Slack is nil when SLACK_BOT_TOKEN is not set.
	Slack *slack.Client
}

// NewClients builds the clients of cfg. It fails only on a GitHub API URL
// go-github cannot use.
func NewClients(cfg config.Config, logger *slog.Logger) (Clients, error) {
	// Each call to GitHub or Slack is bounded by its kind's timeout (a
	// write's a little past GitHub's own ten seconds). Model providers
	// stream and have watchdogs of their own instead.
	ghHTTP := &http.Client{Transport: &calltimeout.Transport{Read: cfg.GitHubTimeouts.Read, Write: cfg.GitHubTimeouts.Write}}
	gh, err := githubtools.NewClient(cfg.GitHubAPIURL, cfg.GitHubToken, ghHTTP)
	if err != nil {
		return Clients{}, fmt.Errorf("GITHUB_API_URL: %w", err)
	}
	cl := Clients{
		Providers: modelProviders(cfg, logger),
		Tools:     tools.NewRegistry(githubtools.Tools(gh)...),
		// The policy's default/base-branch rule guards each repository's
		// default branch too (docs/design.md §5.8).
		DefaultBranches: githubtools.NewRepoBranches(gh),
	}
	if cfg.SlackBotToken != "" {
		cl.Slack = slack.New(cfg.SlackBotToken, slack.OptionHTTPClient(&http.Client{Transport: &calltimeout.Transport{
			Read: cfg.SlackTimeouts.Read, Write: cfg.SlackTimeouts.Write, IsWrite: calltimeout.SlackWrites}}), slack.OptionAPIURL(cfg.SlackAPIURL))
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
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger})
	}
	if cfg.AnthropicAPIKey != "" {
		providers["anthropic"] = anthropic.New(anthropic.Config{BaseURL: cfg.AnthropicBaseURL, APIKey: cfg.AnthropicAPIKey,
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger})
	}
	for _, name := range sortedKeys(config.ProviderKeys) {
		if _, ok := providers[name]; !ok {
			logger.Warn(config.ProviderKeys[name]+" is not set: tasks with a "+name+":<model> model fail on this worker",
				"provider", name)
		}
	}
	return providers
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
