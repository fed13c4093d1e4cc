// Package capstantest is what a user's own tests need to run capstan
// tasks against fakes: a Temporal dev server ([StartDevServer]), the
// sandbox of fake services ([StartSandbox]: a model that plays scripts a
// test writes, in OpenAI's and Anthropic's wire formats, and fakes of
// GitHub and Slack with faults and counters), a fault-injecting
// middleware for the user's own HTTP service ([NewFaults]), and tasks
// started as `starter run` starts them and driven as the starter's
// status, approve and resolve commands do ([StartTask]).
//
// The API is v0: it may change in any release until capstan 1.0.
//
// The sandbox is not exposed: [Sandbox] wraps capstan's internal fakes and
// offers only what this package documents (scripts, the worker
// environment, faults by endpoint, counters). No exported identifier of
// this package names an internal type.
//
// A test runs a worker of its own (package worker, or its own
// go.temporal.io/sdk worker with capstan registered on it) given
// [Sandbox.Env] as its environment and the dev server's client, then
// starts tasks on the worker's task queue with [StartTask].
package capstantest
