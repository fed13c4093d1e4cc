package config

import (
	"fmt"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
)

// Every default of capstan is in this file: the typed values code reads,
// and Settings, the table people read (docs/configuration.md's configuration table is
// rendered from it, and a test fails when the two differ). No package
// outside internal/config declares a Default… identifier (a test checks
// the tree), so a default is changed here or nowhere.

// Defaults of the settings in Settings.
const (
	DefaultTaskQueue = "capstan"
	// DefaultSandboxTaskQueue is the queue of a worker pointed at the
	// sandbox program, whose GitHub and Slack are fakes: the environment the
	// sandbox hands out never names the queue real tasks use.
	DefaultSandboxTaskQueue = "capstan-sandbox"
	DefaultLedgerDSN        = "sqlite://.capstan/ledger.db"
	DefaultUIURL            = "http://localhost:8233"
	DefaultModel            = "openai:gpt-4.1"
	DefaultTenant           = "default"
	DefaultBaseBranch       = "main"
	// DefaultBranchPrefix starts every branch a task creates (the policy's
	// default/branch-prefix rule, docs/design.md §5.8).
	DefaultBranchPrefix  = "capstan/"
	DefaultOpenAIBaseURL = "https://api.openai.com/v1/"
	// DefaultAnthropicBaseURL is the root of Anthropic's API: the SDK
	// appends v1/messages.
	DefaultAnthropicBaseURL = "https://api.anthropic.com/"
	DefaultGitHubAPIURL     = "https://api.github.com/"
	DefaultSlackAPIURL      = "https://slack.com/api/"
	// DefaultConnectTimeout bounds dialling a model provider and the TLS
	// handshake (docs/design.md §4.2).
	DefaultConnectTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds one write call to GitHub or Slack: a
	// little past the ten seconds after which GitHub itself gives up on a
	// request, so a late answer becomes unknown, and is looked for, soon.
	DefaultWriteTimeout = 15 * time.Second
	// DefaultReadTimeout bounds one read call to GitHub or Slack (a tool's
	// read, a reconciler's look-up, the read before a write).
	DefaultReadTimeout = 5 * time.Second
	// DefaultReconcileWindow bounds how long a reconciler waits for an
	// external system to show an effect before calling it absent.
	DefaultReconcileWindow = 60 * time.Second
	// DefaultDependencyOutageLimit bounds how long a tool write confirmed
	// absent is executed again before its task fails
	// dependency_unavailable.
	DefaultDependencyOutageLimit = 30 * time.Minute
	// DefaultMetricsAddr is where a worker serves Prometheus metrics:
	// loopback only, since the endpoint has no authentication. A pool in
	// containers sets CAPSTAN_METRICS_ADDR=:9464 for its scraper.
	DefaultMetricsAddr = "127.0.0.1:9464"
	// DefaultStreamAddr is where a worker serves its live model streams
	// (docs/design.md §9.3): loopback only, since without
	// CAPSTAN_STREAM_TOKEN the endpoint serves loopback clients only
	// anyway. A pool across machines sets CAPSTAN_STREAM_ADDR=:9465,
	// CAPSTAN_STREAM_TOKEN and CAPSTAN_STREAM_URL to an address its
	// followers can reach.
	DefaultStreamAddr = "127.0.0.1:9465"
	// DefaultCodecAddr is where `starter codec-server` listens: loopback
	// only, since whoever reaches it with the token reads every task.
	DefaultCodecAddr = "127.0.0.1:8089"
	// DefaultStreamMaxConns caps the connections a worker's stream
	// endpoint holds at once (CAPSTAN_STREAM_MAX_CONNS); one more is
	// answered 503. A follower holds one per attempt it reads.
	DefaultStreamMaxConns = 128
	// DefaultStreamWriteTimeout bounds every write to a follower
	// (CAPSTAN_STREAM_WRITE_TIMEOUT): one that stops reading is cut then,
	// and its connection given back.
	DefaultStreamWriteTimeout = 10 * time.Second
	// DefaultLedgerGCEvery: a worker runs no ledger retention unless
	// asked (CAPSTAN_LEDGER_GC_EVERY); `starter gc` runs it once.
	DefaultLedgerGCEvery time.Duration = 0
	// DefaultLedgerGCOlderThan is the age, since its last ledger write,
	// below which a worker's retention pass does not consider a task
	// (CAPSTAN_LEDGER_GC_OLDER_THAN).
	DefaultLedgerGCOlderThan = 720 * time.Hour

	// The watchdogs of a model attempt (docs/design.md §4.2), for every
	// limit neither the task nor its worker sets: a silent model is cut
	// after 120 s, an attempt after 10 min, and a dead worker is noticed
	// in 30 s. The first-event wait has no default of its own: it follows
	// the idle timeout.
	DefaultModelIdleTimeout = 120 * time.Second
	DefaultModelMaxDuration = 10 * time.Minute
	DefaultHeartbeatTimeout = 30 * time.Second

	// DefaultMaxTurns bounds a task whose input leaves MaxTurns at zero.
	DefaultMaxTurns = 20
	// DefaultHumanTimeout bounds the wait for a person when the task's input
	// leaves HumanTimeout at zero.
	DefaultHumanTimeout = 24 * time.Hour
	// DefaultApprovalTimeout bounds the wait for a person's approval of an
	// operation (CAPSTAN_APPROVAL_TIMEOUT) when the task's input leaves
	// ApprovalTimeout at zero; unanswered, the operation is denied.
	DefaultApprovalTimeout = 7 * 24 * time.Hour

	// Breaker thresholds (docs/design.md §7): trip after 5 consecutive
	// failures or at least 50 % of at least 10 calls in 60 s; stay open
	// 30 s; then one probe.
	DefaultBreakerFailures     = 5
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerMinCalls     = 10
	DefaultBreakerWindow       = time.Minute
	DefaultBreakerOpen         = 30 * time.Second

	// DefaultLedgerOutageLimit bounds how long a task waits, in one outage,
	// for a ledger it cannot read or write (CAPSTAN_LEDGER_OUTAGE_LIMIT)
	// before it fails ledger_unavailable.
	DefaultLedgerOutageLimit = 30 * time.Minute
	// DefaultMCPConnectTimeout bounds starting or reaching an MCP server
	// and its initialisation; DefaultMCPCallTimeout one call of its tools
	// (a server's capstan.connect_timeout and capstan.call_timeout).
	DefaultMCPConnectTimeout = 10 * time.Second
	DefaultMCPCallTimeout    = 2 * time.Minute
	// DefaultMCPIdleTimeout ends an MCP call that neither answered nor
	// reported progress for this long (capstan.idle_timeout); each
	// progress notification starts it again.
	DefaultMCPIdleTimeout = time.Minute
	// MCPServeName is the serverInfo.name `starter mcp serve` announces. A
	// worker refuses an MCP server that answers with it: through capstan's
	// own server a task could start tasks, or approve its own operations.
	MCPServeName = "capstan"
	// DefaultMCPResultCap is the most bytes of an MCP tool's result the
	// model is shown (CAPSTAN_MCP_RESULT_CAP); a larger result is kept
	// whole in the ledger, by reference.
	DefaultMCPResultCap = 64 << 10
	// DefaultItemCacheBytes bounds the transcript items a worker keeps in
	// memory (CAPSTAN_ITEM_CACHE_BYTES): enough for the turns of a few
	// hundred tasks in flight at a few KB an item.
	DefaultItemCacheBytes = 16 << 20

	// DefaultPolicyRefusals is how many of its tool calls a task's policy
	// refuses before the task fails policy_violation
	// (CAPSTAN_POLICY_REFUSALS).
	DefaultPolicyRefusals = 3

	// DefaultNamespaceWait bounds how long a starting worker waits for its
	// namespace to be visible on the Temporal server
	// (CAPSTAN_NAMESPACE_WAIT): a namespace created a moment before the
	// worker starts is served within a second or two; one that does not
	// exist stops the worker after this long.
	DefaultNamespaceWait = 60 * time.Second
)

// Fixed values: defaults of the packages that use them, which no setting
// changes.
const (
	// DefaultLease is how long a claim on an operation stays live without
	// a heartbeat: tool and delivery activities renew it with every beat
	// (a third of the heartbeat timeout), so it bounds how long a dead
	// worker's claim blocks its successor, not how long a call may take.
	DefaultLease = 30 * time.Second
	// DefaultAnthropicMaxTokens is the output budget of one Anthropic
	// attempt when its provider's configuration sets none. The Messages API
	// requires a value; 8192 is within what every current Claude model can
	// produce, and a turn that needs more ends with stop reason max_tokens
	// (finish reason "length"), which the turn guard handles.
	DefaultAnthropicMaxTokens = 8192
	// DefaultBranchTTL is how long a repository's default branch read from
	// GitHub is believed (github.RepoBranches): a repository whose default
	// branch changed is guarded on its new one at most this long after.
	DefaultBranchTTL = 10 * time.Minute
	// DefaultStreamRetain is how long a worker's live-stream hub keeps an
	// attempt that nobody reads after its last change: long enough for a
	// follower that polls to find it.
	DefaultStreamRetain = 10 * time.Minute
	// DefaultStreamMaxBytes bounds the text a hub keeps of one attempt;
	// past it the text is cut and the follower told so.
	DefaultStreamMaxBytes = 1 << 20
	// DefaultStreamSweepEvery is how often a hub forgets the attempts
	// past DefaultStreamRetain that nobody reads.
	DefaultStreamSweepEvery = time.Minute
	// DefaultGitHubRateLimitWait is how long to wait after a GitHub rate
	// limit whose answer names no time: GitHub's documentation says "wait
	// for at least one minute".
	DefaultGitHubRateLimitWait = time.Minute
)

// DefaultModelLimits are the watchdogs of a model attempt that neither the
// task nor its worker sets; model.Limits converts from them.
var DefaultModelLimits = ModelLimits{
	Idle:             DefaultModelIdleTimeout,
	Total:            DefaultModelMaxDuration,
	HeartbeatTimeout: DefaultHeartbeatTimeout,
}

// DefaultBreakerSettings are the thresholds of a worker's breakers when no
// CAPSTAN_BREAKER_* variable is set.
var DefaultBreakerSettings = BreakerSettings{
	ConsecutiveFailures: DefaultBreakerFailures,
	FailureRatio:        DefaultBreakerFailureRatio,
	MinCalls:            DefaultBreakerMinCalls,
	Window:              DefaultBreakerWindow,
	OpenFor:             DefaultBreakerOpen,
}

// A Setting is one thing people can set: an environment variable or a flag.
type Setting struct {
	// Name is the variable, or the command and flag ("starter run --base").
	Name string
	// Default is the value it takes when unset, as people read it
	// (Markdown: code in backquotes, "—" for none).
	Default string
	// Reader is the binary that reads it: "worker", "starter" or "worker
	// and starter"; empty when every binary does, or when Name says.
	Reader string
	// Meaning says what it does (Markdown).
	Meaning string
}

// Settings are every setting, in the order docs/configuration.md lists them.
var Settings = []Setting{
	{Name: "TEMPORAL_ADDRESS", Default: code(client.DefaultHostPort),
		Meaning: "Temporal frontend (the SDK's envconfig: `TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`, TLS and API keys work too)"},
	{Name: "TEMPORAL_NAMESPACE", Default: code(client.DefaultNamespace), Meaning: "namespace"},
	{Name: "TEMPORAL_API_KEY", Default: none,
		Meaning: "API key of the Temporal server (Temporal Cloud), read by the SDK's envconfig; like every key and token here, masked in whatever the binaries log or print"},
	{Name: "CAPSTAN_TASK_QUEUE", Default: code(DefaultTaskQueue), Meaning: "task queue of the worker pool"},
	{Name: "CAPSTAN_NAMESPACE_WAIT", Default: code(DefaultNamespaceWait), Reader: "worker",
		Meaning: "how long a starting worker waits for its namespace to be visible on the Temporal server (a namespace created a moment before is not served for a second or so); it says so once (`waiting for namespace NS to be visible…`), and past this exits 1 with one sentence"},
	{Name: "CAPSTAN_LEDGER_DSN", Default: code(DefaultLedgerDSN),
		Meaning: "ledger: `sqlite://relative/path.db`, `sqlite:///absolute/path.db` (workers on one machine; workers sharing a file each pay about half as much CPU again per write as one alone, so run one worker per machine), or `postgres://user:pass@host:5432/db` (a pool across machines; `postgresql://` too, with libpq settings such as `?sslmode=require`, `search_path=…`, `pool_max_conns=…`). The schema is created on first open."},
	{Name: "CAPSTAN_MODEL", Default: code(DefaultModel),
		Meaning: "default model of `starter run`: `openai:<model>` or `anthropic:<model>` (against the sandbox the model names a script: `openai:demo`)"},
	{Name: "CAPSTAN_UI_URL", Default: code(DefaultUIURL), Meaning: "Temporal UI base for the links `starter` prints"},
	{Name: "OPENAI_API_KEY", Default: none, Reader: "worker",
		Meaning: "key for the OpenAI-compatible endpoint; the worker serves `openai:` models only when it is set (any value for a local server that needs none). A worker needs this key or `ANTHROPIC_API_KEY`, and the key of the provider an explicit `CAPSTAN_MODEL` names; the sandbox hands out one that is not a secret"},
	{Name: "OPENAI_BASE_URL", Default: code(DefaultOpenAIBaseURL), Reader: "worker",
		Meaning: "any OpenAI-compatible endpoint (vLLM, Ollama, DeepSeek, …); an http or https URL, checked when the worker starts"},
	{Name: "ANTHROPIC_API_KEY", Default: none, Reader: "worker",
		Meaning: "Anthropic key; the worker serves `anthropic:<model>` (Messages streaming) only when it is set. A task naming a provider its worker has no key for fails `worker_misconfigured`"},
	{Name: "ANTHROPIC_BASE_URL", Default: code(DefaultAnthropicBaseURL), Reader: "worker",
		Meaning: "root of an Anthropic-compatible API, without `/v1` (the client appends `v1/messages`)"},
	{Name: "GITHUB_TOKEN", Default: none, Reader: "worker",
		Meaning: "token that may push branches, open pull requests and comment on them (required unless the worker acts as a GitHub App, `CAPSTAN_GITHUB_APP_ID`; the sandbox hands out one that is not a secret); reconcilers read with it too"},
	{Name: "CAPSTAN_GITHUB_APP_ID", Default: none, Reader: "worker",
		Meaning: "the numeric id of a GitHub App the worker acts as instead of `GITHUB_TOKEN` (setting both is refused): it signs the App's JWT with the private key, exchanges it for installation tokens, and renews each before it expires; what it writes is authored by `<app-slug>[bot]`. A wrong id or key stops the worker at startup"},
	{Name: "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE", Default: none, Reader: "worker",
		Meaning: "path of the App's private key, the `.pem` file GitHub gives"},
	{Name: "CAPSTAN_GITHUB_APP_PRIVATE_KEY", Default: none, Reader: "worker",
		Meaning: "the App's private key as PEM text, instead of the file"},
	{Name: "CAPSTAN_GITHUB_APP_INSTALLATION_ID", Default: "looked up per repository", Reader: "worker",
		Meaning: "the App's installation every call uses; unset, the installation of each repository is asked of GitHub on its first call and kept"},
	{Name: "GITHUB_API_URL", Default: code(DefaultGitHubAPIURL), Reader: "worker",
		Meaning: "REST API base, used exactly as given (GitHub Enterprise: `https://HOST/api/v3/`)"},
	{Name: "SLACK_BOT_TOKEN", Default: none, Reader: "worker",
		Meaning: "bot token with `chat:write`, and `channels:history` (`groups:history` for a private channel) so a post whose answer was lost can be looked up; without it, tasks with `--slack` fail at delivery"},
	{Name: "SLACK_API_URL", Default: code(DefaultSlackAPIURL), Reader: "worker", Meaning: "Slack Web API base"},
	{Name: "CAPSTAN_MODEL_IDLE_TIMEOUT", Default: code(DefaultModelIdleTimeout), Reader: "worker",
		Meaning: "how long a model stream may stay silent before the attempt is cut and retried once (`run --idle-timeout` overrides it for one task). These four limits are read by the worker that runs a task's first step, for every limit the task did not set, and then kept with the task (its journal says which came from where); a bad value stops the worker at startup"},
	{Name: "CAPSTAN_MODEL_FIRST_EVENT_TIMEOUT", Default: "the idle timeout", Reader: "worker",
		Meaning: "how long an attempt may wait for its first stream event"},
	{Name: "CAPSTAN_MODEL_MAX_DURATION", Default: code(DefaultModelMaxDuration), Reader: "worker",
		Meaning: "total limit of one model attempt (`run --max-duration` overrides it for one task)"},
	{Name: "CAPSTAN_HEARTBEAT_TIMEOUT", Default: code(DefaultHeartbeatTimeout), Reader: "worker",
		Meaning: "the heartbeat timeout of every activity of a task — model attempts, tool calls, deliveries and reconciliation. A worker silent this long is lost, and its work is taken up by another. It is also the lease of a claim in the ledger, renewed with every heartbeat, so a dead worker's claim ends with it and its successor reconciles at once"},
	{Name: "CAPSTAN_MAX_TOKENS_PER_TASK", Default: code(int(DefaultMaxTokensPerTask)), Reader: "worker",
		Meaning: "token budget of a task that sets none (`run --max-tokens` sets it for one task): the provider's reported usage, input plus output, of every model attempt, abandoned ones included (an attempt cut before it reported usage counts its input's characters / 4). A model request is sent only while the task has spent less; then the task fails `budget_exhausted`. Taken, like the model limits, by the worker that runs the task's first step, and kept with the task"},
	{Name: "CAPSTAN_MAX_COST_PER_TASK", Default: none, Reader: "worker",
		Meaning: "cost budget in US dollars of a task that sets none (`run --max-cost` sets it for one task), priced by `CAPSTAN_MODEL_PRICES`; unset, a task has only its token budget"},
	{Name: "CAPSTAN_MODEL_PRICES", Default: "the providers' list prices of the models capstan knows", Reader: "worker and starter",
		Meaning: "prices per model, USD per million input and output tokens, added to or replacing the defaults: `provider:model=IN/OUT,…` (`openai:gpt-4.1=2/8`). `starter run` refuses a cost budget on a model, or fallback model, without a price"},
	{Name: "CAPSTAN_RECONCILE_WINDOW", Default: code(DefaultReconcileWindow), Reader: "starter",
		Meaning: "how long a reconciler keeps looking for an effect it does not see yet (GitHub's and Slack's lists may lag behind their writes) before it calls it absent"},
	{Name: "CAPSTAN_DEPENDENCY_OUTAGE_LIMIT", Default: code(DefaultDependencyOutageLimit), Reader: "starter",
		Meaning: "how long a conditional or idempotent tool write (pull request, branch, file) that a reconciler confirmed did not happen is executed again, with backoff from 1 s to 5 min, before the task fails `dependency_unavailable` naming the dependency. A write known to be absent never waits for a person. A delivery of the final answer confirmed absent after its three sends is likewise sent again until this limit, then dead-lettered (`delivery_failed`). Fixed in the task's input when it starts"},
	{Name: "CAPSTAN_MODEL_CONNECT_TIMEOUT", Default: code(DefaultConnectTimeout), Reader: "worker",
		Meaning: "dialling a model provider, TLS included"},
	{Name: "CAPSTAN_GITHUB_WRITE_TIMEOUT", Default: code(DefaultWriteTimeout), Reader: "worker",
		Meaning: "one GitHub call that writes (any method but GET, HEAD, OPTIONS), from the request's start to the answer's last byte. A write that times out after its request left is unknown and reconciled at once, so a late answer costs this long, not a minute"},
	{Name: "CAPSTAN_GITHUB_READ_TIMEOUT", Default: code(DefaultReadTimeout), Reader: "worker",
		Meaning: "one GitHub call that reads (a read tool, a reconciler's look-up); a read that times out is retried"},
	{Name: "CAPSTAN_SLACK_WRITE_TIMEOUT", Default: code(DefaultWriteTimeout), Reader: "worker",
		Meaning: "one Slack call that writes (`chat.*`), as for GitHub"},
	{Name: "CAPSTAN_SLACK_READ_TIMEOUT", Default: code(DefaultReadTimeout), Reader: "worker",
		Meaning: "one Slack call that reads (`conversations.history` when a post is looked for)"},
	{Name: "CAPSTAN_BREAKER_FAILURES", Default: code(DefaultBreakerFailures), Reader: "worker",
		Meaning: "a dependency's breaker opens after this many failures in a row…"},
	{Name: "CAPSTAN_BREAKER_FAILURE_RATIO", Default: code(DefaultBreakerFailureRatio), Reader: "worker",
		Meaning: "…or when at least this share of its calls failed…"},
	{Name: "CAPSTAN_BREAKER_MIN_CALLS", Default: code(DefaultBreakerMinCalls), Reader: "worker",
		Meaning: "…among at least this many calls…"},
	{Name: "CAPSTAN_BREAKER_WINDOW", Default: code(DefaultBreakerWindow), Reader: "worker",
		Meaning: "…within this rolling window"},
	{Name: "CAPSTAN_BREAKER_OPEN", Default: code(DefaultBreakerOpen), Reader: "worker",
		Meaning: "how long an open breaker sends nothing before one probe call"},
	{Name: "CAPSTAN_LEDGER_OUTAGE_LIMIT", Default: code(DefaultLedgerOutageLimit), Reader: "worker",
		Meaning: "how long a task waits for a ledger it cannot reach (its breaker `ledger` open, its server down) before it fails with `ledger_unavailable`; nothing is sent while it waits, and the wait spends no retry budget"},
	{Name: "CAPSTAN_BREAKERS", Default: code("on"), Reader: "worker",
		Meaning: "`off` sends every call whatever its dependency's state (for measurements)"},
	{Name: "CAPSTAN_METRICS_ADDR", Default: code(DefaultMetricsAddr), Reader: "worker",
		Meaning: "`host:port` of its Prometheus endpoint (`GET /metrics`); `:9464` listens on every interface (containers), port `0` picks a free one (the worker prints `metrics: URL`); set it empty to serve none. An address it cannot listen on stops the worker at startup"},
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Default: "none: no traces", Reader: "worker and starter",
		Meaning: "the OpenTelemetry collector the binaries export their traces to over OTLP (`http://localhost:4318`; the standard variable, as are the other `OTEL_EXPORTER_OTLP_*`: headers, timeout, certificates). Set, a task's trace starts at `starter run` and follows it through the workflow, its turns, model attempts, tool calls and reconciles (docs/reference.md, Traces); unset, nothing is exported and every tracer is a no-op"},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Default: "`OTEL_EXPORTER_OTLP_ENDPOINT`", Reader: "worker and starter",
		Meaning: "the same for traces alone, the full URL (`http://localhost:4318/v1/traces`); either one turns traces on. `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turns them off"},
	{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Default: "`http/protobuf`", Reader: "worker and starter",
		Meaning: "`grpc` exports over OTLP/gRPC (port 4317) instead of HTTP; `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` too"},
	{Name: "OTEL_SERVICE_NAME", Default: "`capstan-worker`, `capstan-starter`", Reader: "worker and starter",
		Meaning: "the traces' `service.name`; `OTEL_RESOURCE_ATTRIBUTES` adds to their resource"},
	{Name: "CAPSTAN_TRACE_CONTENT", Default: code("false"), Reader: "worker",
		Meaning: "`true` lets spans carry content: a model attempt's answer (`gen_ai.output.messages`) and a tool call's arguments (`gen_ai.tool.call.arguments`), 4 KiB each at most, with the worker's secrets masked. Otherwise no attribute holds a prompt, an answer, a file's content or a secret: ids, names, counts and outcomes only"},
	{Name: "CAPSTAN_STREAM_ADDR", Default: code(DefaultStreamAddr), Reader: "worker",
		Meaning: "`host:port` where it serves the text of its model attempts as they stream, for `starter follow` (server-sent events); `:9465` listens on every interface, port `0` picks a free one (the worker prints `live stream: URL`); set it empty to serve none (followers then see retries and results, not text)"},
	{Name: "CAPSTAN_STREAM_URL", Default: "`http://` + the address listened on (this host's name for `:9465`)", Reader: "worker",
		Meaning: "the URL followers use to reach that endpoint, for a pool across machines or behind a proxy (`http://worker-1.internal:9465`)"},
	{Name: "CAPSTAN_STREAM_TOKEN", Default: none, Reader: "worker and starter",
		Meaning: "the bearer token the live stream requires of every follower, which `starter follow` and `run --follow` send (`Authorization: Bearer …`). Unset, the worker serves its live stream to loopback clients only (others get 403), whatever `CAPSTAN_STREAM_ADDR` listens on. Over a network, put TLS in front (a proxy, advertised by an `https://` `CAPSTAN_STREAM_URL`): the token travels in every request"},
	{Name: "CAPSTAN_STREAM_ORIGINS", Default: "loopback origins only", Reader: "starter",
		Meaning: "the origins (`scheme://host:port`, or URLs, comma-separated: `https://worker-1.internal:9465,https://worker-2.internal:9465`) `starter follow` sends `CAPSTAN_STREAM_TOKEN` to besides loopback ones. A stream URL comes from a worker's heartbeat, which anyone who can write to Temporal can set: a follower reads another origin's stream without the token, and follows no redirect to another origin"},
	{Name: "CAPSTAN_CODEC_KEYS", Default: "none: nothing is encrypted", Reader: "worker and starter",
		Meaning: "AES-256-GCM keys that encrypt every payload in Temporal's history (through the SDK's codec data converter) and the ledger's stored contents: `id:base64` pairs separated by commas, newest first (`openssl rand -base64 32` makes a key). The first key encrypts; any listed key decrypts what its id encrypted, so a rotation puts the new key first and keeps the old one after it. Plaintext rows of an older ledger stay readable. A malformed value stops the binary with one sentence; a payload whose key id is not listed is an error naming that id. Every worker and starter of a pool needs the same keys"},
	{Name: "CAPSTAN_CODEC_AUTH", Default: none, Reader: "starter",
		Meaning: "the token `starter codec-server` requires (`Authorization: Bearer …`, as `temporal workflow show --codec-auth 'Bearer …'` sends; or as the first path segment of the endpoint, for the web UI); required to run it"},
	{Name: "CAPSTAN_CODEC_ADDR", Default: code(DefaultCodecAddr), Reader: "starter",
		Meaning: "`host:port` where `starter codec-server` listens (`--addr`); loopback by default, since whoever holds the token reads every task through it"},
	{Name: "CAPSTAN_CODEC_CORS_ORIGIN", Default: "`CAPSTAN_UI_URL`", Reader: "starter",
		Meaning: "the browser origin `starter codec-server` answers with CORS headers (`--cors-origin`): the Temporal web UI's"},
	{Name: "CAPSTAN_STREAM_MAX_CONNS", Default: code(DefaultStreamMaxConns), Reader: "worker",
		Meaning: "connections its live stream holds at once (a follower holds one per attempt it reads); one more is answered 503"},
	{Name: "CAPSTAN_STREAM_WRITE_TIMEOUT", Default: code(DefaultStreamWriteTimeout), Reader: "worker",
		Meaning: "the deadline of every write to a follower; one that stops reading is cut then and its connection given back. The hub forgets an attempt nobody reads " +
			showDuration(DefaultStreamRetain) + " after its last change, checked every " + showDuration(DefaultStreamSweepEvery)},
	{Name: "CAPSTAN_BRANCH_PREFIX", Default: code(DefaultBranchPrefix), Reader: "starter",
		Meaning: "what every branch a task creates must start with (the policy's `default/branch-prefix` rule, docs/design.md §5.8); fixed in the task's input when `starter run` starts it"},
	{Name: "CAPSTAN_POLICY", Default: none, Reader: "worker and starter",
		Meaning: "path of a YAML policy file whose rules decide tool calls beside the default rules, each on its own: a deny of either wins (docs/design.md §5.8); unset, the defaults alone. `starter run` reads it and records its text in the task's input, so the task keeps those rules whatever is deployed later; a bad file, or a rule naming a tool that is no built-in one and no MCP name, is refused with one sentence naming its line and rule, and nothing is started. A worker loads its own as its floor, decided on every call beside the task's recorded rules, and stops at start with that sentence when it is bad or names a tool the worker lacks; only the worker's file loosens a default (an allow rule with `override: default/NAME`). `starter policy check FILE` validates one, `starter policy explain` shows which rule decides a call"},
	{Name: "CAPSTAN_POLICY_REFUSALS", Default: code(DefaultPolicyRefusals), Reader: "starter",
		Meaning: "how many tool calls the task's policy refuses before the task fails with `policy_violation` (each refusal before that is a tool error the model reads); fixed in the task's input; `starter run --max-refusals` overrides it"},
	{Name: "CAPSTAN_APPROVAL_TIMEOUT", Default: code(DefaultApprovalTimeout), Reader: "starter",
		Meaning: "how long an operation waits for a person's approval (`starter approve`, `starter deny`; docs/design.md §5.9) before it is denied with the reason \"no approval within …\"; fixed in the task's input; `starter run --approval-timeout` overrides it"},
	{Name: "CAPSTAN_APPROVERS", Default: none, Reader: "starter",
		Meaning: "comma-separated names (`--as`) who may approve or deny a task's operations (docs/design.md §5.9); fixed in the task's input, where the approve and deny updates' validator refuses any other name, so no Temporal client goes around it; unset, anyone may answer"},
	{Name: "CAPSTAN_MCP_CONFIG", Default: none, Reader: "worker",
		Meaning: "path of a JSON file of MCP servers whose tools the agent may call, in the `mcpServers` convention (`command`/`args`/`env` or `url`/`headers`, `${VAR}` expanded from the worker's environment and never written to history), with capstan's settings per server under `capstan` (docs/tools.md: MCP servers). The worker connects to every server at start; a bad file or an unreachable server stops it with one sentence naming the server and the field. `worker --mcp-check FILE` connects and lists the tools with their classes"},
	{Name: "CAPSTAN_MCP_RESULT_CAP", Default: code(DefaultMCPResultCap), Reader: "worker",
		Meaning: "the most bytes of an MCP tool's result the model is shown. A larger result is kept whole in the ledger as a transcript item; the model is shown its text cut to about the cap (the structured content left out when it alone is over a quarter of it) with a note giving the full size and the item's reference, and the task's history holds only references and a short preview"},
	{Name: "CAPSTAN_LEDGER_GC_EVERY", Default: "`0` (off)", Reader: "worker",
		Meaning: "how often the worker runs the ledger's retention, as `starter gc` does once: it deletes the ledger rows of tasks that are closed and that Temporal no longer has (past their namespace's retention, or deleted), never a running or still-retained task's, nor those of tasks started before ledger keys were scoped. Safe on every worker of a pool at once"},
	{Name: "CAPSTAN_LEDGER_GC_OLDER_THAN", Default: code(DefaultLedgerGCOlderThan), Reader: "worker",
		Meaning: "the retention's `--older-than`: a task whose last ledger write is more recent is not considered"},
	{Name: "CAPSTAN_DEPLOYMENT_NAME", Default: none, Reader: "worker",
		Meaning: "the Worker Deployment the worker belongs to (Temporal Worker Versioning; no `.`); set with `CAPSTAN_BUILD_ID`, the worker polls as that deployment version and every task it starts is pinned to its build: the task runs to its end on workers of that build, whatever is deployed later. Both unset, the worker runs unversioned. A new version takes tasks once it is made current (docs/configuration.md: deploying a new version)"},
	{Name: "CAPSTAN_BUILD_ID", Default: none, Reader: "worker",
		Meaning: "the build id of this worker's code within `CAPSTAN_DEPLOYMENT_NAME` (a release tag, a commit); `starter status` shows the build a task is pinned to"},
	{Name: "CAPSTAN_TENANT_WEIGHTS", Default: none, Reader: "starter",
		Meaning: "fairness weights per tenant, `tenant=weight,…` (from `0.001` to `1000`; a tenant not listed weighs `1`): when tenants' tasks wait for the same workers, each is dispatched in proportion to its weight. `starter run` sets the task's weight as it starts it, with `--tenant` as the fairness key of every workflow and activity task (the server's `matching.enableFairness` must be on)"},
	{Name: "CAPSTAN_ITEM_CACHE_BYTES", Default: code(DefaultItemCacheBytes) + " (16 MiB)", Reader: "worker",
		Meaning: "the most bytes of transcript items (messages, tool arguments and results) the worker keeps in memory, so a task's next turn on the same worker reads them from there instead of the ledger; the least recently used leave first, an item over an eighth of it is never kept, and `0` keeps none (every turn reads its transcript from the ledger). What it holds is plain text in the worker's memory, as every item is while an activity uses it"},
	{Name: "CAPSTAN_ACTIVITY_SLOTS", Default: "the SDK's (`1000`)", Reader: "worker",
		Meaning: "how many activities (model attempts, tool calls, deliveries) the worker runs at once; the rest wait on the server's task queue, where fairness keys and priorities order them"},
	{Name: "starter run --base", Default: code(DefaultBaseBranch), Meaning: "base branch of the task's changes"},
	{Name: "starter run --tenant", Default: code(DefaultTenant), Meaning: "tenant the task's operations belong to; also its search attribute `CapstanTenant` and the fairness key of every workflow and activity task it schedules"},
	{Name: "starter run --priority", Default: "`3` (Temporal's default)",
		Meaning: "the task's priority, `1` (highest) to `5`: when tasks wait, those of a higher priority are dispatched first, for every workflow and activity task of the task"},
	{Name: "starter run --max-turns", Default: code(DefaultMaxTurns),
		Meaning: "most model turns before the task fails with `max_turns`"},
	{Name: "starter run --human-timeout", Default: code(DefaultHumanTimeout),
		Meaning: "how long the task waits for a person to resolve an operation (at least `1m`) before it fails with `needs_human_timeout`"},
	{Name: "starter run --allow-repo", Default: none,
		Meaning: "a further repository, `OWNER/NAME`, the task's policy lets it read and write besides `--repo` and the repositories of `--comment` (repeatable)"},
	{Name: "starter run --allow-branch", Default: none,
		Meaning: "an existing branch the task's policy lets it write onto, in its repositories, besides the branches it creates (repeatable; never its base or the default branch)"},
	{Name: "starter run --label", Default: none, Meaning: "a label of the task, `KEY=VALUE`, which policy rules read (repeatable)"},
	{Name: "starter run --max-refusals", Default: "`CAPSTAN_POLICY_REFUSALS`",
		Meaning: "how many tool calls the task's policy refuses before the task fails with `policy_violation`"},
	{Name: "starter run --require-approval", Default: none,
		Meaning: "a tool name, or a class (`read_only`, `idempotent`, `conditional`, `unsafe`), whose calls wait for a person's approval before anything is sent (repeatable)"},
	{Name: "starter run --approval-timeout", Default: "`CAPSTAN_APPROVAL_TIMEOUT`",
		Meaning: "how long an operation waits for approval before it is denied"},
}

// none is the Default of a setting that has none.
const none = "—"

// code is v as people read it, in backquotes: a duration in the unit
// docs/design.md states it in (seconds below ten minutes, else whole
// minutes or hours).
func code(v any) string {
	var s string
	switch v := v.(type) {
	case time.Duration:
		s = showDuration(v)
	case string:
		s = v
	case int:
		s = strconv.Itoa(v)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		panic(fmt.Sprintf("config: no way to show a default of type %T", v))
	}
	return "`" + s + "`"
}

func showDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= 10*time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
