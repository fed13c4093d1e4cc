package main

import (
	"log/slog"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/anthropic"
	"github.com/capstanhq/capstan/internal/model/openai"
)

// modelProviders returns the model providers this worker serves, by the
// provider part of "provider:model": each provider whose key the
// configuration holds, and on a sandbox worker also "sandbox", the sandbox's
// scripted model under its own name. ValidateWorker has made sure there is
// at least one. A provider without a key is not registered: a task naming it
// fails on this worker with a worker-configuration error, which the startup
// warning announces. The keys go only into the providers' HTTP clients,
// never into a workflow input.
func modelProviders(cfg config.Config, sandbox bool, logger *slog.Logger) map[string]model.Provider {
	providers := make(map[string]model.Provider)
	if cfg.OpenAIAPIKey != "" {
		providers["openai"] = openai.New(openai.Config{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey,
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger})
	}
	if cfg.AnthropicAPIKey != "" {
		// On a sandbox worker the base URL is the sandbox model server's
		// root, which serves Anthropic's POST /v1/messages beside OpenAI's
		// chat completions (config.UseSandbox).
		providers["anthropic"] = anthropic.New(anthropic.Config{BaseURL: cfg.AnthropicBaseURL, APIKey: cfg.AnthropicAPIKey,
			ConnectTimeout: cfg.ModelConnectTimeout, Logger: logger})
	}
	if sandbox {
		// The sandbox model is OpenAI-compatible and already what "openai"
		// points at; "sandbox:<script>" names it plainly.
		providers["sandbox"] = providers["openai"]
	}
	for _, name := range keys(config.ProviderKeys) {
		if _, ok := providers[name]; !ok {
			logger.Warn(config.ProviderKeys[name]+" is not set: tasks with a "+name+":<model> model fail on this worker",
				"provider", name)
		}
	}
	return providers
}
