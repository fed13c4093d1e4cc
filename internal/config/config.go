// Package config reads capstan's configuration (docs/design.md §8): the environment
// first, flags override. Every default is filled here, once, by FromEnv;
// each binary then checks what it needs with ValidateWorker or
// ValidateStarter, so a bad value is one sentence at startup rather than a
// failure in the middle of a task. Secrets are read here, in the worker, and
// go only into the clients that need them — never into workflow inputs.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is capstan's environment, with every default filled in.
type Config struct {
	TaskQueue     string // CAPSTAN_TASK_QUEUE
	LedgerDSN     string // CAPSTAN_LEDGER_DSN
	Model         string // CAPSTAN_MODEL: provider:model
	UIURL         string // CAPSTAN_UI_URL: base URL of the Temporal web UI, no trailing slash
	OpenAIAPIKey  string // OPENAI_API_KEY
	OpenAIBaseURL string // OPENAI_BASE_URL
	GitHubToken   string // GITHUB_TOKEN
	// GitHubApp (CAPSTAN_GITHUB_APP_*) is the GitHub App the worker acts
	// as instead of GitHubToken; at most one of the two is set.
	GitHubApp     GitHubApp
	GitHubAPIURL  string // GITHUB_API_URL, with a trailing slash
	SlackBotToken string // SLACK_BOT_TOKEN
	SlackAPIURL   string // SLACK_API_URL, with a trailing slash
	BaseBranch    string
	Lease         time.Duration

	// BranchPrefix (CAPSTAN_BRANCH_PREFIX) starts every branch a task
	// creates.
	BranchPrefix string
	// PolicyFile (CAPSTAN_POLICY) is the path of the policy file; "" for
	// the default rules alone.
	PolicyFile string
	// MCPConfig (CAPSTAN_MCP_CONFIG) is the path of the worker's MCP
	// servers file (internal/mcp); "" for none.
	MCPConfig string
	// MCPResultCap (CAPSTAN_MCP_RESULT_CAP) is the most bytes of an MCP
	// tool's result the model is shown.
	MCPResultCap int
	// ItemCacheBytes (CAPSTAN_ITEM_CACHE_BYTES) bounds the transcript
	// items the worker keeps in memory; 0 keeps none.
	ItemCacheBytes int
	// PolicyRefusals (CAPSTAN_POLICY_REFUSALS) is how many of its calls
	// the policy refuses in one task before the task fails
	// policy_violation; the starter fixes it in the task's input.
	PolicyRefusals int
	// ApprovalTimeout (CAPSTAN_APPROVAL_TIMEOUT) is how long an operation
	// waits for a person's approval before it is denied; the starter fixes
	// it in the task's input.
	ApprovalTimeout time.Duration
	// Approvers (CAPSTAN_APPROVERS, comma-separated) are the only names
	// whose approve or deny a task takes; the starter fixes them in the
	// task's input, where the updates' validator enforces them. Empty:
	// anyone may answer.
	Approvers []string

	// AnthropicAPIKey (ANTHROPIC_API_KEY) is optional: a worker without it
	// serves no anthropic:<model> task.
	AnthropicAPIKey string
	// AnthropicBaseURL (ANTHROPIC_BASE_URL) is the API's root, without
	// /v1, with a trailing slash.
	AnthropicBaseURL string

	// ModelConnectTimeout is the worker's: CAPSTAN_MODEL_CONNECT_TIMEOUT.
	ModelConnectTimeout time.Duration
	// GitHubTimeouts and SlackTimeouts bound one call to each, by kind
	// (CAPSTAN_GITHUB_READ_TIMEOUT, CAPSTAN_GITHUB_WRITE_TIMEOUT,
	// CAPSTAN_SLACK_READ_TIMEOUT, CAPSTAN_SLACK_WRITE_TIMEOUT).
	GitHubTimeouts, SlackTimeouts CallTimeouts
	// ModelLimits are the worker's defaults for the watchdogs of a task's
	// model attempts and the heartbeat timeout of its activities
	// (CAPSTAN_MODEL_IDLE_TIMEOUT, CAPSTAN_MODEL_FIRST_EVENT_TIMEOUT,
	// CAPSTAN_MODEL_MAX_DURATION, CAPSTAN_HEARTBEAT_TIMEOUT). A task takes
	// them at its start for every limit its input leaves unset (starter run
	// --idle-timeout and --max-duration set them per task), and keeps them
	// in its input from then on. FirstEvent is zero when unset: it follows
	// the idle timeout.
	ModelLimits ModelLimits
	// ReconcileWindow (CAPSTAN_RECONCILE_WINDOW) bounds how long an unseen
	// effect counts as "not yet" before a reconciler calls it absent; it
	// goes into each task's input.
	ReconcileWindow time.Duration
	// DependencyOutageLimit (CAPSTAN_DEPENDENCY_OUTAGE_LIMIT): how long a
	// task executes a write confirmed absent again before it fails
	// dependency_unavailable; the starter fixes it in the task's input.
	DependencyOutageLimit time.Duration
	// MetricsAddr (CAPSTAN_METRICS_ADDR) is the host:port of the worker's
	// Prometheus endpoint; empty when the variable is set but empty, which
	// turns the endpoint off.
	MetricsAddr string
	// Breakers are the thresholds of the worker's circuit breakers
	// (docs/design.md §7): CAPSTAN_BREAKER_FAILURES,
	// CAPSTAN_BREAKER_FAILURE_RATIO, CAPSTAN_BREAKER_MIN_CALLS,
	// CAPSTAN_BREAKER_WINDOW, CAPSTAN_BREAKER_OPEN.
	Breakers BreakerSettings
	// LedgerOutageLimit (CAPSTAN_LEDGER_OUTAGE_LIMIT) bounds how long a
	// task waits, in one outage, for a ledger it cannot reach before it
	// fails ledger_unavailable.
	LedgerOutageLimit time.Duration
	// MaxTokensPerTask (CAPSTAN_MAX_TOKENS_PER_TASK) and MaxCostPerTask
	// (CAPSTAN_MAX_COST_PER_TASK, US dollars, 0 when unset) are the
	// worker's budgets for a task that sets none (starter run --max-tokens,
	// --max-cost); a task takes them with its model limits, at its start.
	MaxTokensPerTask int64
	MaxCostPerTask   float64
	// ModelPrices (CAPSTAN_MODEL_PRICES over DefaultModelPrices) price a
	// task's tokens, by provider:model.
	ModelPrices map[string]Price
	// StreamToken (CAPSTAN_STREAM_TOKEN) is what `starter follow` presents
	// to a worker's live stream as a bearer token; the worker reads it
	// with LiveStreamFromLookupEnv.
	StreamToken string
	// StreamOrigins (CAPSTAN_STREAM_ORIGINS) are the origins besides
	// loopback ones `starter follow` sends StreamToken to (StreamOrigins).
	StreamOrigins []string
	// BreakersOff (CAPSTAN_BREAKERS=off) runs the worker without breakers:
	// every call is sent, whatever the dependency's state. For
	// measurements; never the default.
	BreakersOff bool
	// TraceContent (CAPSTAN_TRACE_CONTENT=true) lets the worker's spans
	// carry content: a model attempt's text and a tool call's arguments,
	// through the worker's redactor. Off, no attribute holds a prompt,
	// content or secret.
	TraceContent bool
	// LedgerGC is the worker's periodic ledger retention
	// (CAPSTAN_LEDGER_GC_EVERY, CAPSTAN_LEDGER_GC_OLDER_THAN).
	LedgerGC LedgerGC
	// CodecKeys (CAPSTAN_CODEC_KEYS) encrypt payloads and the ledger's
	// stored contents, the first encrypting; none when unset (internal/codec).
	CodecKeys []CodecKey
	// CodecAuth (CAPSTAN_CODEC_AUTH) is the bearer token `starter
	// codec-server` requires; CodecAddr (CAPSTAN_CODEC_ADDR) where it
	// listens; CodecOrigin (CAPSTAN_CODEC_CORS_ORIGIN) the browser origin
	// it answers, by default the UI's (CAPSTAN_UI_URL).
	CodecAuth, CodecAddr, CodecOrigin string
	// Deployment (CAPSTAN_DEPLOYMENT_NAME, CAPSTAN_BUILD_ID) is the Worker
	// Deployment Version the worker runs as; zero for unversioned.
	Deployment Deployment
	// TenantWeights (CAPSTAN_TENANT_WEIGHTS) are the fairness weights the
	// starter gives a task of each named tenant.
	TenantWeights TenantWeights
	// ActivitySlots (CAPSTAN_ACTIVITY_SLOTS) is how many activities the
	// worker runs at once; 0 for the SDK's default.
	ActivitySlots int
	// NamespaceWait (CAPSTAN_NAMESPACE_WAIT) bounds how long a starting
	// worker waits for its namespace to be visible on the server.
	NamespaceWait time.Duration

	// modelSet records that CAPSTAN_MODEL was given, so a worker can refuse
	// to serve a default model it has no key for (the built-in default
	// alone does not oblige a worker that holds only another provider's key).
	modelSet bool
	// problems are the values FromEnv could not read; Validate* report them.
	problems []error
	// codecProblem is why CAPSTAN_CODEC_KEYS could not be read (also in
	// problems), for commands that validate nothing else (CheckCodecKeys).
	codecProblem error
	// secrets are the environment's secret values (Secrets).
	secrets []string
}

// FromEnv reads the configuration through getenv and fills every default.
// Values it cannot parse are kept as problems for ValidateWorker and
// ValidateStarter to report. getenv cannot tell an empty variable from an
// unset one, so both take the default; a worker reads with FromLookupEnv,
// where an empty CAPSTAN_METRICS_ADDR turns the metrics off.
func FromEnv(getenv func(string) string) Config {
	return FromLookupEnv(func(key string) (string, bool) {
		v := getenv(key)
		return v, v != ""
	})
}

// FromLookupEnv is FromEnv through lookup (os.LookupEnv in production),
// which tells a variable set empty from an unset one.
func FromLookupEnv(lookup func(string) (string, bool)) Config {
	getenv := func(key string) string {
		v, _ := lookup(key)
		return v
	}
	or := func(key, def string) string {
		if v := strings.TrimSpace(getenv(key)); v != "" {
			return v
		}
		return def
	}
	c := Config{
		TaskQueue:     or("CAPSTAN_TASK_QUEUE", DefaultTaskQueue),
		LedgerDSN:     or("CAPSTAN_LEDGER_DSN", DefaultLedgerDSN),
		Model:         or("CAPSTAN_MODEL", DefaultModel),
		UIURL:         strings.TrimRight(or("CAPSTAN_UI_URL", DefaultUIURL), "/"),
		OpenAIAPIKey:  getenv("OPENAI_API_KEY"),
		OpenAIBaseURL: or("OPENAI_BASE_URL", DefaultOpenAIBaseURL),
		GitHubToken:   getenv("GITHUB_TOKEN"),
		GitHubAPIURL:  withSlash(or("GITHUB_API_URL", DefaultGitHubAPIURL)),
		SlackBotToken: getenv("SLACK_BOT_TOKEN"),
		SlackAPIURL:   withSlash(or("SLACK_API_URL", DefaultSlackAPIURL)),
		BaseBranch:    DefaultBaseBranch,
		Lease:         DefaultLease,
		MetricsAddr:   DefaultMetricsAddr,
	}
	c.AnthropicAPIKey = getenv("ANTHROPIC_API_KEY")
	c.readSecrets(getenv)
	c.readGitHubApp(getenv)
	if keys, err := ParseCodecKeys(getenv("CAPSTAN_CODEC_KEYS")); err != nil {
		c.problems = append(c.problems, err)
		c.codecProblem = err
	} else {
		c.CodecKeys = keys
	}
	c.CodecAuth = strings.TrimSpace(getenv("CAPSTAN_CODEC_AUTH"))
	c.CodecAddr = or("CAPSTAN_CODEC_ADDR", DefaultCodecAddr)
	c.CodecOrigin = strings.TrimRight(or("CAPSTAN_CODEC_CORS_ORIGIN", c.UIURL), "/")
	c.BranchPrefix = or("CAPSTAN_BRANCH_PREFIX", DefaultBranchPrefix)
	c.PolicyFile = strings.TrimSpace(getenv("CAPSTAN_POLICY"))
	c.MCPConfig = strings.TrimSpace(getenv("CAPSTAN_MCP_CONFIG"))
	c.MCPResultCap = c.positiveInt(getenv, "CAPSTAN_MCP_RESULT_CAP", DefaultMCPResultCap)
	c.ItemCacheBytes = c.intAtLeast(getenv, "CAPSTAN_ITEM_CACHE_BYTES", DefaultItemCacheBytes, 0)
	c.PolicyRefusals = c.positiveInt(getenv, "CAPSTAN_POLICY_REFUSALS", DefaultPolicyRefusals)
	c.AnthropicBaseURL = withSlash(or("ANTHROPIC_BASE_URL", DefaultAnthropicBaseURL))
	c.modelSet = strings.TrimSpace(getenv("CAPSTAN_MODEL")) != ""
	c.StreamToken = streamToken(lookup)
	if origins, err := StreamOrigins(getenv("CAPSTAN_STREAM_ORIGINS")); err != nil {
		c.problems = append(c.problems, err)
	} else {
		c.StreamOrigins = origins
	}
	if v, ok := lookup("CAPSTAN_METRICS_ADDR"); ok {
		c.MetricsAddr = strings.TrimSpace(v)
	}
	duration := func(key string, def time.Duration) time.Duration {
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			c.problems = append(c.problems, fmt.Errorf("%s=%q is not a positive Go duration such as 90s or 2m", key, v))
			return def
		}
		return d
	}
	c.ModelConnectTimeout = duration("CAPSTAN_MODEL_CONNECT_TIMEOUT", DefaultConnectTimeout)
	c.GitHubTimeouts = CallTimeouts{Read: duration("CAPSTAN_GITHUB_READ_TIMEOUT", DefaultReadTimeout), Write: duration("CAPSTAN_GITHUB_WRITE_TIMEOUT", DefaultWriteTimeout)}
	c.SlackTimeouts = CallTimeouts{Read: duration("CAPSTAN_SLACK_READ_TIMEOUT", DefaultReadTimeout), Write: duration("CAPSTAN_SLACK_WRITE_TIMEOUT", DefaultWriteTimeout)}
	c.ReconcileWindow = duration("CAPSTAN_RECONCILE_WINDOW", DefaultReconcileWindow)
	c.DependencyOutageLimit = duration("CAPSTAN_DEPENDENCY_OUTAGE_LIMIT", DefaultDependencyOutageLimit)
	c.LedgerOutageLimit = duration("CAPSTAN_LEDGER_OUTAGE_LIMIT", DefaultLedgerOutageLimit)
	c.NamespaceWait = duration("CAPSTAN_NAMESPACE_WAIT", DefaultNamespaceWait)
	c.ApprovalTimeout = duration("CAPSTAN_APPROVAL_TIMEOUT", DefaultApprovalTimeout)
	for name := range strings.SplitSeq(getenv("CAPSTAN_APPROVERS"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.Approvers = append(c.Approvers, name)
		}
	}
	c.readBudgets(getenv)
	c.readDeployment(getenv)
	c.ModelLimits = ModelLimits{
		FirstEvent:       duration("CAPSTAN_MODEL_FIRST_EVENT_TIMEOUT", DefaultModelLimits.FirstEvent),
		Idle:             duration("CAPSTAN_MODEL_IDLE_TIMEOUT", DefaultModelLimits.Idle),
		Total:            duration("CAPSTAN_MODEL_MAX_DURATION", DefaultModelLimits.Total),
		HeartbeatTimeout: duration("CAPSTAN_HEARTBEAT_TIMEOUT", DefaultModelLimits.HeartbeatTimeout),
	}
	if err := c.ModelLimits.Validate(); err != nil {
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_MODEL_*: %w", err))
	}
	c.Breakers = BreakerSettings{
		ConsecutiveFailures: c.positiveInt(getenv, "CAPSTAN_BREAKER_FAILURES", DefaultBreakerSettings.ConsecutiveFailures),
		FailureRatio:        c.ratio(getenv, "CAPSTAN_BREAKER_FAILURE_RATIO", DefaultBreakerSettings.FailureRatio),
		MinCalls:            c.positiveInt(getenv, "CAPSTAN_BREAKER_MIN_CALLS", DefaultBreakerSettings.MinCalls),
		Window:              duration("CAPSTAN_BREAKER_WINDOW", DefaultBreakerSettings.Window),
		OpenFor:             duration("CAPSTAN_BREAKER_OPEN", DefaultBreakerSettings.OpenFor),
	}
	c.LedgerGC = LedgerGC{
		Every:     c.nonNegativeDuration(getenv, "CAPSTAN_LEDGER_GC_EVERY", DefaultLedgerGCEvery),
		OlderThan: c.nonNegativeDuration(getenv, "CAPSTAN_LEDGER_GC_OLDER_THAN", DefaultLedgerGCOlderThan),
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("CAPSTAN_TRACE_CONTENT"))); v {
	case "", "false", "0":
	case "true", "1":
		c.TraceContent = true
	default:
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_TRACE_CONTENT=%q is neither true nor false", v))
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("CAPSTAN_BREAKERS"))); v {
	case "", "on":
	case "off":
		c.BreakersOff = true
	default:
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_BREAKERS=%q is neither on nor off", v))
	}
	return c
}

// positiveInt reads key as a whole number of at least 1, or def when unset.
func (c *Config) positiveInt(getenv func(string) string, key string, def int) int {
	return c.intAtLeast(getenv, key, def, 1)
}

// intAtLeast reads key as a whole number of at least least, or def when
// unset.
func (c *Config) intAtLeast(getenv func(string) string, key string, def, least int) int {
	v := strings.TrimSpace(getenv(key))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		c.problems = append(c.problems, fmt.Errorf("%s=%q is not a whole number of at least %d", key, v, least))
		return def
	}
	return n
}

// ratio reads key as a number above 0 and at most 1, or def when unset.
func (c *Config) ratio(getenv func(string) string, key string, def float64) float64 {
	v := strings.TrimSpace(getenv(key))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 1 {
		c.problems = append(c.problems, fmt.Errorf("%s=%q is not a ratio above 0 and at most 1, such as 0.5", key, v))
		return def
	}
	return f
}

// SandboxTaskQueue is the queue sandbox tasks run on: the configured queue
// when CAPSTAN_TASK_QUEUE names one other than the default, else
// DefaultSandboxTaskQueue. `starter demo` starts its task there; the
// worker pointed at the sandbox polls it (scripts/demo.sh gives the sandbox
// program the same queue to hand out).
func (c Config) SandboxTaskQueue() string {
	if c.TaskQueue == "" || c.TaskQueue == DefaultTaskQueue {
		return DefaultSandboxTaskQueue
	}
	return c.TaskQueue
}

// ValidateWorker reports, as one error, what keeps a worker from starting:
// unreadable values and missing credentials.
func (c Config) ValidateWorker() error {
	errs := append([]error(nil), c.problems...)
	if c.OpenAIAPIKey == "" && c.AnthropicAPIKey == "" {
		errs = append(errs, errors.New("no model provider has a key: OPENAI_API_KEY is not set (any value for a local server that needs none), nor is ANTHROPIC_API_KEY; set one (or, offline, point the worker at the sandbox program: make demo)"))
	} else if err := c.checkModelKey(); err != nil {
		errs = append(errs, err)
	}
	if err := checkBaseURL(c.OpenAIBaseURL); err != nil {
		errs = append(errs, fmt.Errorf("OPENAI_BASE_URL=%q %v (such as %s)", c.OpenAIBaseURL, err, DefaultOpenAIBaseURL))
	}
	if err := checkBaseURL(c.AnthropicBaseURL); err != nil {
		errs = append(errs, fmt.Errorf("ANTHROPIC_BASE_URL=%q %v (such as %s)", c.AnthropicBaseURL, err, DefaultAnthropicBaseURL))
	}
	if err := c.checkGitHubAuth(); err != nil {
		errs = append(errs, err)
	}
	if err := checkListenAddr(c.MetricsAddr); err != nil {
		errs = append(errs, fmt.Errorf("CAPSTAN_METRICS_ADDR=%q %v (such as %s, or :9464 for every interface; set it empty to serve no metrics)",
			c.MetricsAddr, err, DefaultMetricsAddr))
	}
	return join(errs)
}

// ProviderKeys names, for each model provider a worker can serve, the
// variable that holds its key. A worker serves a provider only when that
// variable is set.
var ProviderKeys = map[string]string{"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

// HasProviderKey reports whether the worker has a key for provider.
func (c Config) HasProviderKey(provider string) bool {
	switch provider {
	case "openai":
		return c.OpenAIAPIKey != ""
	case "anthropic":
		return c.AnthropicAPIKey != ""
	}
	return false
}

// checkModelKey refuses a worker whose CAPSTAN_MODEL, set explicitly, names
// a provider it has no key for: every task started with the default model
// would fail on it.
func (c Config) checkModelKey() error {
	if !c.modelSet {
		return nil
	}
	// Only the provider matters here. A malformed value, or one naming a
	// provider without a key (sandbox) or unknown to ProviderKeys, is left
	// to the starter, which parses CAPSTAN_MODEL with model.ParseRef and
	// reports it; this package imports no capstan package.
	provider, name, ok := strings.Cut(c.Model, ":")
	if !ok || name == "" {
		return nil
	}
	key, ok := ProviderKeys[provider]
	if !ok || c.HasProviderKey(provider) {
		return nil
	}
	return fmt.Errorf("CAPSTAN_MODEL=%s names the %s provider, but %s is not set: set it, or name a model of a provider this worker has a key for",
		c.Model, provider, key)
}

// ValidateStarter reports what keeps starter from starting a task: values
// of the environment it could not read. (CAPSTAN_MODEL is checked where it
// is used, since --model overrides it.)
func (c Config) ValidateStarter() error {
	return join(c.problems)
}

// CheckCodecKeys is the one sentence saying why CAPSTAN_CODEC_KEYS could
// not be read, or nil: every command that talks to Temporal or the ledger
// stops on it rather than read or write without the keys it was given.
func (c Config) CheckCodecKeys() error { return c.codecProblem }

// join is errors.Join on one line: binaries print one sentence.
func join(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// WorkflowURL is the Temporal UI page of a workflow.
func (c Config) WorkflowURL(namespace, workflowID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", c.UIURL, namespace, workflowID)
}

// Hostname for identities; never fails.
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}

// checkListenAddr accepts "" (nothing to listen on) and host:port with a
// numeric port; whether the host resolves and the port is free is learnt by
// listening.
func checkListenAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("is not host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("has no port number: %q", port)
	}
	return nil
}

// checkBaseURL accepts an absolute http or https URL.
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("is not an http or https URL")
	}
	return nil
}

func withSlash(u string) string {
	if u == "" || strings.HasSuffix(u, "/") {
		return u
	}
	return u + "/"
}

// CallTimeouts bound one call to a dependency by its kind.
type CallTimeouts struct {
	Read, Write time.Duration
}
