// Package sandbox provides offline stand-ins for the three systems capstan
// talks to: an OpenAI-compatible model provider, the GitHub REST API and the
// Slack Web API.
//
// Each fake is an [http.Handler] that keeps counters of the effects it has
// performed (requests, streams completed, messages posted, pull requests
// opened, ...) and exposes them as JSON under GET /_sandbox/stats, so a test
// or benchmark can assert that an effect happened exactly once. Each fake also
// has a fault plug point ([Fault], installed with SetFault) that runs before
// the fake records anything: a fault can answer with an error, stall, drop the
// connection, or let the fake act and then lose the answer.
//
// [Start] runs all three fakes on loopback with real HTTP servers. It is used
// by `worker --sandbox`, the demo, the tests and the benchmarks. The fakes
// never need real credentials and never reach the network.
//
// The model fake plays scripts: data files embedded from scripts/*.json (see
// [ScriptNames]) plus the generated family turns-N. The request's model field
// names the script; the step played is the number of assistant messages in the
// request, so the fake is stateless and a retried request replays its step.
package sandbox
