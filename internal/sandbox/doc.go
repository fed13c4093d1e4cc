// Package sandbox provides offline stand-ins for the three systems capstan
// talks to: an OpenAI-compatible model provider, the GitHub REST API and the
// Slack Web API.
//
// Each fake is an [http.Handler] that keeps counters of the effects it has
// performed (requests, streams completed, messages posted, pull requests
// opened, ...) and exposes them as JSON under GET /_sandbox/stats, so a test
// or benchmark can assert that an effect happened exactly once. Paths under
// /_sandbox/ are the sandbox's own: they are never faulted and never counted.
//
// [Start] runs all three fakes on loopback with real HTTP servers. It is used
// by `worker --sandbox`, the demo, the tests and the benchmarks. The fakes
// never need real credentials and never reach the network.
//
// The model fake plays scripts: data files embedded from scripts/*.json (see
// [ScriptNames]) plus the generated family turns-N. The request's model field
// names the script; the step played is the number of assistant messages in the
// request, so the fake is stateless and a retried request replays its step.
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
// endpoint of the GitHub or Slack fake (Times 0: every request until
// cleared). Add rules with AddFault, or over HTTP on a running sandbox, such
// as a `worker --sandbox` process an end-to-end test drives:
//
//	POST   /_sandbox/faults   {"endpoint":"pulls/create","kind":"drop","times":1}
//	GET    /_sandbox/faults   the rules, in order, each with "fired": how often it applied
//	DELETE /_sandbox/faults   remove every rule
//
// on the GitHub fake's base URL, or on the Slack fake's host (without /api/).
// A POST answers 201 with the rule as stored (defaults filled in), or 400 with
// {"error": "..."} saying what is wrong. Durations are in Go syntax ("1.5s").
// Endpoints are named by GitHub's REST operation ids (git/create-ref,
// git/get-ref, repos/create-or-update-file-contents, repos/get-content,
// pulls/create, pulls/list, issues/create-comment, issues/list-comments, and
// the rest listed on [GitHub]) and by Slack's method names
// (chat.postMessage, conversations.history, auth.test). The kinds:
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
package sandbox
