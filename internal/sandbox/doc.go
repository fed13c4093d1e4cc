// Package sandbox provides offline stand-ins for the three systems capstan
// talks to: a model provider (OpenAI Chat Completions and Anthropic Messages,
// both streaming), the GitHub REST API and the Slack Web API.
//
// Each fake is an [http.Handler] that keeps counters of the effects it has
// performed (requests, streams completed, messages posted, pull requests
// opened, ...) and exposes them as JSON under GET /_sandbox/stats, so a test
// or benchmark can assert that an effect happened exactly once. Paths under
// /_sandbox/ are the sandbox's own: they are never faulted and never counted.
//
// [Start] runs all three fakes on loopback with real HTTP servers. It is used
// by the sandbox program (cmd/sandbox, which `make demo` runs), the tests
// and the benchmarks; [Sandbox.WorkerEnv] is the environment that points an
// ordinary worker at them. The worker binary never links this package. The
// fakes never need real credentials and never reach the network.
//
// The model fake plays scripts: data files embedded from scripts/*.json (see
// [ScriptNames]) plus the generated family turns-N, and those a test adds to
// one Model at run time with [Model.AddScript] (what package capstantest's
// Script does). The request's model field
// names the script; the step played is the number of assistant messages in the
// request, so the fake is stateless and a retried request replays its step.
// It answers POST /v1/chat/completions with chat.completion.chunk events and
// POST /v1/messages with Anthropic's message_start, ping,
// content_block_start/delta (text_delta, input_json_delta in 16-byte
// fragments)/stop, message_delta (stop_reason, usage) and message_stop, and
// errors in each API's JSON shape.
//
// # Faults
//
// There are two ways to make a fake misbehave.
//
// A [Fault] function, installed with SetFault on any of the three fakes, sees
// every request first and may answer it, stall, or call the fake and lose its
// answer. It is for tests in the same process.
//
// A [FaultRule] applies one kind of fault to the first Times requests to one
// endpoint of the GitHub, Slack or model fake (Times 0: every request until
// cleared). Add rules with AddFault, or over HTTP on a running sandbox, such
// as the sandbox program:
//
//	POST   /_sandbox/faults   {"endpoint":"pulls/create","kind":"drop","times":1}
//	GET    /_sandbox/faults   the rules, in order, each with "fired": how often it applied
//	DELETE /_sandbox/faults   remove every rule
//
// on the GitHub fake's base URL, or on the Slack or model fake's host
// (without /api/ or /v1).
// A POST answers 201 with the rule as stored (defaults filled in), or 400 with
// {"error": "..."} saying what is wrong. Durations are in Go syntax ("1.5s").
// Endpoints are named by GitHub's REST operation ids (git/create-ref,
// git/get-ref, repos/create-or-update-file-contents, repos/get-content,
// pulls/create, pulls/list, issues/create-comment, issues/list-comments, and
// the rest listed on [GitHub]) and by Slack's method names
// (chat.postMessage, conversations.history, conversations.list, auth.test),
// and GitHub's GET /user as users/get-authenticated. The kinds:
//
//   - fail: answer 5xx ("status", default 500) before acting; nothing changes.
//   - drop: act, then close the connection without an answer. net/http
//     resends an idempotent request (a GET) once when a reused connection
//     closes unanswered, so a drop on a read may go unseen by the client
//     unless it fires twice or the connection is new.
//   - delay: act, then answer after "delay"; make it longer than the
//     caller's timeout. The held answer is given up when the client leaves,
//     the request's context ends, or [Sandbox.Close] runs.
//   - lag: answer, but leave out what was written less than "lag" ago:
//     GitHub pulls/list and the comment lists, git/get-ref (a branch just
//     created answers 404; its later commits do not lag), and Slack
//     conversations.history.
//   - rate_limit: refuse before acting, as the service does. GitHub: 429 (or
//     "status" 403) with x-ratelimit-remaining 0 and x-ratelimit-reset
//     "retry_after" (default 1m) ahead; go-github v62 reads a 403 as a
//     *github.RateLimitError and a 429 as a *github.ErrorResponse, and a
//     client that has seen the reset refuses to send before it. Slack: 429
//     with Retry-After and {"ok":false,"error":"ratelimited"}, which slack-go
//     reads as a *slack.RateLimitedError.
//   - secondary_rate_limit (GitHub): refuse with 403, Retry-After and
//     "You have exceeded a secondary rate limit..."; go-github reads it as a
//     *github.AbuseRateLimitError and holds back every request until then.
//
// The effect counters count what the fake really did, once: a refusal
// counts nothing, not even the request; a drop or a delay counts the effect
// it let happen although the client never heard of it.
//
// # Authors and Slack's limits
//
// The GitHub and Slack fakes record who wrote what: the token's user.
// SandboxUserToken(login) writes as login (Slack: a person, user id
// "U"+LOGIN, no bot id); any other token as the sandbox's own account
// (GitHubLogin; Slack's bot U0SANDBOX/B0SANDBOX), which GET /user and
// auth.test report. Given a GitHub App ([GitHub.SetApp]), the GitHub fake
// also serves the Apps API (GET /app, GET /repos/{o}/{r}/installation, GET
// /app/installations/{id}, POST /app/installations/{id}/access_tokens, named
// apps/get-authenticated, apps/get-repo-installation, apps/get-installation
// and apps/create-installation-access-token), checks the App's JWT against
// its public key, issues installation tokens ("ghs_…") of a set lifetime for
// the repositories and permissions asked, writes what they write as
// "<slug>[bot]", answers 404 to one used on a repository it was not asked
// for, and 401 "Bad credentials" to an expired or unknown one. Slack's conversations.history, as in Slack, takes only a
// channel id; POST /_sandbox/limits on the Slack host ({"every": ns,
// "page_max": n}, or [Slack.LimitHistory]) makes it answer one request per
// interval (429 ratelimited with the Retry-After left) and at most page_max
// messages a page, as Slack does for apps outside its Marketplace.
//
// # Model faults
//
// The model's rules name the endpoint "chat/completions" (OpenAI) or
// "messages" (Anthropic). The same faults can be put on a step of a script,
// as the step's "fault" (the rule without endpoint; "times" then counts the
// plays of that step, 0 meaning every play), so a scenario can fail at one
// turn; an endpoint rule takes precedence. Every kind works in both formats:
//
//   - status: answer "status" (400 to 599: 429, 500, 503, 529, ...) with the
//     API's error body for it (429: rate limit; 503 and 529: overloaded),
//     plus Retry-After ("retry_after", whole seconds) and retry-after-ms
//     ("retry_after_ms") only when set.
//   - refuse_connection: close the model's port for "refuse_for" (required;
//     "times" must be 0): a dial is refused before a byte is written, a true
//     NOT_SENT; idle connections are closed, a request still arriving on an
//     open one is reset. It shuts the whole port (both formats and
//     /_sandbox/), refused dials are counted nowhere, and it cannot be a
//     step's fault. The port reopens on the same address.
//   - reset_connection: read the request, then reset the TCP connection
//     with no answer. The client had written its request, so it sees
//     SENT_NO_HEADERS, not NOT_SENT: a server that has accepted the
//     connection cannot make the client's write fail. Unlike
//     refuse_connection it strikes per request, counted.
//   - hold_headers: never answer; hold the request until the client gives
//     up or the sandbox closes.
//   - stall: send the headers and "after_events" events, then nothing until
//     the client gives up or the sandbox closes.
//   - endless: stream a short text delta every 50 ms, never finishing,
//     until the client goes away.
//   - overloaded_event, rate_limit_event: "after_events" events, then an
//     error inside the 200 stream (OpenAI: data: {"error":{...}} with type
//     server_error or code rate_limit_exceeded; Anthropic: event: error with
//     overloaded_error or rate_limit_error), then the end of the body.
//   - empty: a complete answer with no content (stop / end_turn).
//   - malformed_arguments: the first tool call (github_get_file when the
//     step has none) with its arguments' last byte cut off.
//   - unknown_tool: the first tool call (one with {} when the step has
//     none) renamed to [UnknownToolName].
//   - context_overflow: 400, OpenAI code context_length_exceeded, Anthropic
//     invalid_request_error "prompt is too long: N tokens > M maximum"; with
//     "prompt_bytes_over" only for request bodies longer than that, so a
//     test can see compaction make the prompt fit.
//   - max_tokens: the first half of the step's text, finish_reason "length"
//     (stop_reason "max_tokens").
//
// "after_events" counts server-sent events from the first (OpenAI's role
// chunk; Anthropic's message_start and ping count too) and never reaches the
// answer's closing events. Held, stalled and endless requests end when the
// client's connection closes, and [Sandbox.Close] ends them and waits for
// their handlers. [ModelStats] counts every request received, faulted ones
// included, per format, and the faulted ones apart; [Model.Requests] (GET
// /_sandbox/requests) lists each with when it arrived, the script step it
// asked for and the fault that answered it.
package sandbox
