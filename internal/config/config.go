// Package config reads capstan's configuration (DESIGN §9): the environment
// first, flags override. Secrets are read here, in the worker, and go only
// into the clients that need them — never into workflow inputs.
package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"
)

// Defaults.
const (
	DefaultTaskQueue = "capstan"
	DefaultUIURL     = "http://localhost:8233"
	DefaultModel     = "openai:gpt-4.1"
	DefaultTenant    = "default"
)

// Config is capstan's environment.
type Config struct {
	TaskQueue     string // CAPSTAN_TASK_QUEUE
	LedgerDSN     string // CAPSTAN_LEDGER_DSN
	Model         string // CAPSTAN_MODEL: provider:model
	UIURL         string // CAPSTAN_UI_URL: base URL of the Temporal web UI
	OpenAIAPIKey  string // OPENAI_API_KEY
	OpenAIBaseURL string // OPENAI_BASE_URL
	GitHubToken   string // GITHUB_TOKEN
	GitHubAPIURL  string // GITHUB_API_URL
	SlackBotToken string // SLACK_BOT_TOKEN
	SlackAPIURL   string // SLACK_API_URL
}

// FromEnv reads the configuration through getenv (os.Getenv in production).
func FromEnv(getenv func(string) string) Config {
	or := func(key, def string) string {
		if v := strings.TrimSpace(getenv(key)); v != "" {
			return v
		}
		return def
	}
	return Config{
		TaskQueue:     or("CAPSTAN_TASK_QUEUE", DefaultTaskQueue),
		LedgerDSN:     or("CAPSTAN_LEDGER_DSN", ""),
		Model:         or("CAPSTAN_MODEL", DefaultModel),
		UIURL:         strings.TrimRight(or("CAPSTAN_UI_URL", DefaultUIURL), "/"),
		OpenAIAPIKey:  getenv("OPENAI_API_KEY"),
		OpenAIBaseURL: or("OPENAI_BASE_URL", ""),
		GitHubToken:   getenv("GITHUB_TOKEN"),
		GitHubAPIURL:  or("GITHUB_API_URL", ""),
		SlackBotToken: getenv("SLACK_BOT_TOKEN"),
		SlackAPIURL:   or("SLACK_API_URL", ""),
	}
}

// WorkflowURL is the Temporal UI page of a workflow.
func (c Config) WorkflowURL(namespace, workflowID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", c.UIURL, namespace, workflowID)
}

// DialTemporal connects to the Temporal server named by the SDK's envconfig
// (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE, the config file
// for TLS and API keys). It fails within timeout with a sentence naming the
// address when the server cannot be reached.
func DialTemporal(ctx context.Context, identity string, logger log.Logger, timeout time.Duration) (client.Client, client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return nil, opts, fmt.Errorf("read Temporal client configuration: %w", err)
	}
	if opts.HostPort == "" {
		opts.HostPort = client.DefaultHostPort
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	if identity != "" {
		opts.Identity = identity
	}
	opts.Logger = logger
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		if errors.Is(dctx.Err(), context.DeadlineExceeded) {
			return nil, opts, fmt.Errorf("cannot reach the Temporal server at %s (namespace %s) within %s; is it running? (set TEMPORAL_ADDRESS)", opts.HostPort, opts.Namespace, timeout)
		}
		return nil, opts, fmt.Errorf("cannot connect to the Temporal server at %s (namespace %s): %w", opts.HostPort, opts.Namespace, err)
	}
	return c, opts, nil
}

// Hostname for identities; never fails.
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}
