// Package workflows holds AgentTask, capstan's durable turn loop (docs/design.md §3):
// model turns under the turn guard, tool calls as operations with stable ids,
// and the delivery of the final answer.
//
// Workflow code here is deterministic: time comes from workflow.Now, waits
// from workflow.Sleep, random ids and jitter from workflow.SideEffect, and
// every map is iterated in sorted order. Changes to shipped logic go behind
// workflow.GetVersion, and replay_test.go replays recorded histories from
// testdata/ to prove it.
//
// History grows linearly with turns: the transcript lives in the ledger
// database, content-addressed, and activities receive references to it.
package workflows
