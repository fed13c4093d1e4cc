// Package worker runs capstan inside a Go program: a worker that takes
// AgentTask workflows from a Temporal task queue and runs their model turns
// and tool calls with capstan's guarantees — each effect claimed in the
// ledger under its operation id, sent at most once, an unknown outcome
// looked up before anything is sent again — for the built-in GitHub tools,
// the tools of the MCP servers of its configuration, and tools of the
// program's own (package tool), given in [Options.Tools] or added with
// [Worker.RegisterTool].
//
// A program's tool is treated as github_comment is: the task's policy
// decides each call by the tool's name and class (CEL rules of
// CAPSTAN_POLICY and of the task), a person approves it when the task asks
// for that, it counts toward the task's budget, the worker's metrics label
// its operations with its name, and its calls go through a circuit breaker
// of their own: "<service>/read" or "<service>/write", the service being
// what the name starts with up to its first '_' ("tickets_create" →
// tickets/write), unless the tool names its own (tool.Guarded).
//
// There are two ways in:
//
//   - [New] (or [Run]) builds a whole worker, with a Temporal worker of its
//     own on its task queue; the binary cmd/worker is this, configured from
//     its environment.
//   - [NewRegistration] puts capstan's workflow and activities on a
//     go.temporal.io/sdk/worker.Worker the program makes itself, with its
//     own client, options and interceptors, to which it adds
//     [Registration.Interceptor].
//
// Either way the configuration is the worker's environment
// (docs/configuration.md: model keys, GITHUB_TOKEN, limits, breakers…),
// read through [Options.LookupEnv], with the fields of [Options] set
// explicitly taking precedence over the variables they stand for. Secrets
// stay in the process: no error New returns, and no line the worker logs,
// quotes one, and none enters workflow history.
//
// # Stability
//
// This API is v0: it may change in any release until capstan 1.0, and the
// CHANGELOG says how. Expected to change: Options may gain fields (set
// fields by name), the registration on a worker of the program's may be
// folded into fewer calls, and the refusals' wording may change (test
// them with errors.Is against the Err variables). The workflow's name
// ("AgentTask"), its activities' names and the ledger's schema are
// capstan's and are not part of this API.
package worker
