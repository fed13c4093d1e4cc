package workflows

import "go.temporal.io/sdk/workflow"

// HistoryVersion labels the released AgentTask logic that new recorded
// histories come from: `make record-history` writes
// testdata/<HistoryVersion>-<case>.json, and replay_test.go replays every
// file of every label against the current code.
//
// A recorded history is never rewritten: it is what a task started by that
// release did, and the current code must still replay it. When workflow
// logic changes (behind workflow.GetVersion, so the old histories keep
// replaying), bump this label ("v1" → "v2") in the same change and record
// the new histories under it; the files of the earlier labels stay.
//
//	v1  the foundation
//	v2  changeOperationIDByPosition
//	v3  changeReconcileUnknown
//	v4  changeWorkflowWaitsOutBreakers
//	v5  changeFullTurnGuard
//	v6  changeLimitsFromWorker
//	v7  changeAllThroughWorkerLimits
//	v8  changeCancelSettlesEveryUnknown
//	v9  changeResolveOnce
//	v10 changeLedgerOutageWaits, changeLedgerKeysPerChain
//	v11 changePolicyAtToolBoundary, changeBudgets
//	v12 changeTruncateWaitsForLedger, changeAbsentWritesRetried,
//	    changeApprovals, changePolicyByReference, changeMCPToolsPinned,
//	    changeSettleBySending
//	v13 changeScheduledTaskIDs, changeAbsentDeliveriesRetried,
//	    changeAllThroughV13 (one marker for all; search attributes at start)
//	v14 LogicUnmarked (no marker at all where the starter stamps the input)
//	v15 changeApprovalsBound (read on its own marker where an operation
//	    first waits for approval; CurrentLogic stays LogicUnmarked)
//	v16 changeSearchFlags (read on its own marker where a run first sets
//	    a flag: CapstanFlags instead of three Bools; CurrentLogic stays)
const HistoryVersion = "v16"

// Logic levels a starter stamps on a task's input (AgentTaskInput.Logic).
const (
	// LogicUnmarked: a run whose first step runs on this code or later,
	// of a task whose starter stamped it so, records no GetVersion marker
	// as it starts — neither changeAllThroughV13's marker nor the
	// TemporalChangeVersion search-attribute update the SDK adds to every
	// marker, two events and a visibility write per task — and runs with
	// every change in effect (readLogic).
	LogicUnmarked = 14
	// CurrentLogic is what this code's starter stamps.
	CurrentLogic = LogicUnmarked
)

// readLogic reads, as a run starts, whether every change through
// changeAllThroughV13 holds (allThroughV13) and whether every change
// through changeLimitsFromWorker does (allThroughWorkerLimits).
//
// A task its starter stamped LogicUnmarked, whose run is not replaying
// here, is running its first step on this code now: every change holds and
// nothing is recorded. Replaying, the same run's start either ran on this
// code, which recorded no marker, or on an older worker, which recorded its
// umbrella marker (changeAllThroughV13 from v13, changeAllThroughWorkerLimits
// from v7 to v12); version markers are read before the step's code runs, so
// GetVersion — which records nothing while replaying — tells them apart.
// Only a worker older than v7, which recorded neither, would be mistaken
// for this code: a pool moving from such a build to this one runs its old
// workers to the end first, or runs under Worker Versioning.
//
// An unstamped task (a starter before LogicUnmarked) reads the markers as
// every run did before: GetVersion records them on a first execution.
func readLogic(ctx workflow.Context, in AgentTaskInput) (allThroughV13, allThroughWorkerLimits bool) {
	stamped := in.Logic >= LogicUnmarked
	if stamped && !workflow.IsReplaying(ctx) {
		return true, true
	}
	if workflow.GetVersion(ctx, changeAllThroughV13, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		return true, true
	}
	if workflow.GetVersion(ctx, changeAllThroughWorkerLimits, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		return false, true
	}
	if stamped { // replaying a start this code ran: no marker
		return true, true
	}
	return false, false
}

// RunsUnmarked reports whether a run that started with in and whose history
// holds the version markers markers (by change id) started on code from
// LogicUnmarked on, with every change in effect and no marker recorded —
// as readLogic reads it, for `starter versions`.
func RunsUnmarked(in AgentTaskInput, markers map[string]bool) bool {
	return in.Logic >= LogicUnmarked && !markers[changeAllThroughV13] && !markers[changeAllThroughWorkerLimits]
}

// Changes to workflow logic, each read with workflow.GetVersion where the
// logic forks. A change id — the string, which histories record — is never
// reused or removed while a history that predates it may still replay; the
// Go name says what the change gates and may be renamed.
const (
	// changeOperationIDByPosition: an operation without a business key is
	// named by its call's position in the committed turn, not by a uuid
	// drawn with SideEffect, so re-running a committed turn (a reset)
	// yields the same operation ids and the ledger replays their results.
	changeOperationIDByPosition = "operation-id-by-position"
	// changeReconcileUnknown: an operation whose outcome is unknown is
	// reconciled (and, when nobody can tell, resolved by a person) instead
	// of ending the task as operation_unknown.
	changeReconcileUnknown = "reconcile-unknown-operations"
	// changeWorkflowWaitsOutBreakers: an attempt, operation or delivery
	// that an open circuit breaker kept from being sent (breaker_open,
	// BreakerOpen) is waited out by the workflow — the time left,
	// journalled and shown in the current details, spending no retry
	// budget — and Temporal no longer retries BreakerOpen itself.
	changeWorkflowWaitsOutBreakers = "breaker-waits"
	// changeFullTurnGuard: the rest of the turn guard (docs/design.md
	// §4.4). A final answer cut by the output token limit is continued (at
	// most maxContinuations times) or fails model_output_truncated; a
	// context overflow compacts the transcript and retries (at most
	// maxCompactions rounds); a spent overload budget or a total cut
	// switches once per turn to the task's next fallback model; persistent
	// tasks retry overloads for up to persistentOverloadFor; and a wait
	// longer than journalEvery is slept in slices, each with a journal line.
	changeFullTurnGuard = "model-turns-complete"
	// changeLimitsFromWorker: a task takes the limits its input leaves
	// unset from the worker that runs its first step (the WorkerLimits local
	// activity, recorded in history) and keeps them in its input, instead
	// of config.DefaultModelLimits.
	changeLimitsFromWorker = "worker-limits"
	// changeAllThroughWorkerLimits: one marker, read as a task's run
	// starts, saying that every change above — through
	// changeLimitsFromWorker — is in effect at its newest version. A task
	// started since reads it and no other, so its history carries one
	// version marker (and one TemporalChangeVersion search-attribute
	// update) instead of one per change; a task started before it has no
	// such marker and reads each change where the logic forks, as it did
	// (task.inEffect). A change made after it is read on its own marker.
	changeAllThroughWorkerLimits = "all-changes-v7"

	// Changes after changeAllThroughWorkerLimits, each read on its own
	// marker with workflow.GetVersion.

	// changeCancelSettlesEveryUnknown: a cancelled task reconciles, before
	// it ends, every effect whose outcome is not known
	// (capstan.Outcome.Known) — a delivery cancelled while a reconciler
	// asked about it, an operation that waited for a person — where it
	// reconciled only those recorded unknown; and it leaves read-only
	// operations alone, which have no effect to find. Read only as a
	// cancelled task ends with such an effect (settleCancelled).
	changeCancelSettlesEveryUnknown = "cancel-settles-every-unknown"

	// changeResolveOnce: the resolve update's handler sets an operation's
	// resolution only if nobody has (compare-and-set: a second resolver,
	// even one accepted in the same workflow task, is refused with who
	// resolved it), and the update of a found completes only when the
	// worker has read its URL back through the tool's lookup (Reconcile):
	// a URL that does not name the operation's effect, or one that could
	// not be read back, is the update's error and the operation waits for
	// a person again. Read by every resolve update's handler.
	changeResolveOnce = "resolve-once-found-read-back"

	// changeLedgerOutageWaits: a task waits out an unreachable ledger —
	// the BreakerOpen of breaker "ledger" from a tool call, a delivery, a
	// model attempt or a reconciliation — for up to the worker's
	// CAPSTAN_LEDGER_OUTAGE_LIMIT in one outage, then fails
	// ledger_unavailable; and a reconciliation the ledger kept from
	// running is waited out and started again (Temporal no longer retries
	// its BreakerOpen), never read as indeterminate. Read when the task
	// first waits for the ledger, and as each reconciliation starts.
	changeLedgerOutageWaits = "ledger-outage-waits"
	// changeLedgerKeysPerChain: every ledger key a task makes — turn,
	// attempt, operation and delivery ids — carries the chain scope
	// (ChainScope: its namespace and first run id), and the activities
	// that write the ledger are given it (contract's Scope fields), so a
	// task started again with a used id, or with the same id in another
	// namespace on the same ledger, never sees another chain's rows, and
	// retention (starter gc) knows whose rows they are. Read once, as the
	// chain's first run starts; a continued run takes the scope from its
	// checkpoint.
	changeLedgerKeysPerChain = "ledger-keys-per-chain"
	// changePolicyAtToolBoundary: every tool call is decided against the
	// task's policy context (AgentTaskInput.Policy; derived from Repo,
	// Comments, Base and Tenant when the starter set none) before anything
	// is sent (docs/design.md §5.8): ExecuteTool is given the context, the
	// workflow journals each decision it reports, counts the refusals
	// (OperationRecord.PolicyRule) and fails policy_violation at the
	// task's limit, and a tool the policy always refuses is not offered
	// to the model. Read once, as the chain's first run starts; a
	// continued run takes it from its checkpoint.
	changePolicyAtToolBoundary = "policy-at-tool-boundary"

	// changeBudgets: a task has a token budget and may have a cost
	// budget (AgentTaskInput.Budget, the rest from its first worker with
	// the model limits), adds up what every model attempt spent — the
	// provider's usage or the attempt's estimate, abandoned attempts
	// included — in TaskResult.Spend, and sends a model request only while
	// that is below its budget, else fails budget_exhausted. Read once, as
	// the chain's first run starts; a continued run has a Spend in its
	// checkpoint.
	changeBudgets = "token-and-cost-budgets"

	// changeTruncateWaitsForLedger: a TruncateTranscript that finds the
	// ledger unreachable (BreakerOpen of breaker "ledger") is waited out
	// by the workflow, journalled and counted against the worker's outage
	// limit, and started again, as every other activity's wait for the
	// ledger is; before it, Temporal's five attempts (about a minute) were
	// all the outage a truncation survived. Read where the wait forks.
	changeTruncateWaitsForLedger = "truncate-waits-for-ledger"

	// changeAbsentWritesRetried: a tool write a reconciler confirmed
	// absent after its re-executions were spent is not a question for a
	// person — capstan knows it did not happen. It is executed again with
	// the same operation id after a jittered backoff (1 s doubling to
	// 5 min), journalled and shown in the current details, until it
	// happens or the task's DependencyOutageLimit has passed since the
	// operation was first unknown; then the task fails
	// dependency_unavailable naming the dependency. Only an indeterminate
	// verdict asks a person. Read where the verdict forks.
	changeAbsentWritesRetried = "absent-writes-retried"

	// changeApprovals: a call the task's policy decides require_approval
	// (a policy file's effect, or starter run --require-approval) waits
	// for a person instead of being refused (docs/design.md §5.9):
	// ExecuteTool is told the task can ask (ExecuteToolInput.Approvals)
	// and returns awaiting_approval having sent nothing; the workflow
	// records the operation awaiting_approval, sets CapstanAwaitingApproval
	// and its current details, posts one Slack notice when the task has a
	// channel, and waits for the approve or deny update or the task's
	// approval timeout; then it runs ExecuteTool again with the approval
	// or the denial. The same effect asked again gets the same answer.
	// Read once, as the chain's first run starts, by a chain with a policy
	// context; a continued run takes it from its checkpoint.
	changeApprovals = "approvals"

	// changePolicyByReference: a task whose policy context holds a policy
	// file's text names it by reference (TaskPolicy.SourceRef, the ledger
	// item contract.PolicyItem): the text travels in the chain's first
	// turn's ModelTurn inputs only, which store it with the turn, and
	// every other ModelTurn and ExecuteTool input carries the context
	// without it, so history no longer grows by the file's size per call.
	// Read once, as the chain's first run starts, and only for a task with
	// a file; the reference is carried by continue-as-new in the input. A
	// chain started before keeps sending the text.
	changePolicyByReference = "policy-by-reference"

	// changeMCPToolsPinned: the set of tools whose schema a server may
	// change (MCP tools), each with its schema hash, is fixed when the
	// chain's first run starts — from the worker that runs it, through the
	// WorkerLimits local activity, recorded in history — and kept in the
	// task's input (AgentTaskInput.Tools); every model turn is given it
	// (ModelTurnInput.Tools): only those tools are offered, and a call
	// records the hash the tool was fixed with, so ExecuteTool refuses a
	// call of a tool that vanished or changed its schema under the
	// running task. Read once, as the chain's first run starts; a
	// continued run has the set in its input.
	changeMCPToolsPinned = "mcp-tools-pinned"

	// changeSettleBySending: the Reconcile of a running task's tool
	// operation may settle a conditional write whose service refuses a
	// second effect — a pull request (one open per head and base), a
	// branch (one per name) — by sending it again with the same operation
	// id after one lookup saw nothing (contract.ReconcileInput.Resend,
	// docs/design.md §5.5): created is found, refused as already there is
	// read back and found if it is the operation's. Such a write settles
	// in seconds instead of a consistency window and a re-execution. A
	// cancelled task's reconciliation never sends. Read where each
	// Reconcile's input is built.
	changeSettleBySending = "settle-by-sending"

	// changeScheduledTaskIDs: a task a Temporal Schedule started (starter
	// schedule create) takes its task id from the schedule's id and the
	// run's scheduled time (ScheduledTaskID, "SID-20261202T160500Z"),
	// read from the search attributes TemporalScheduledById and
	// TemporalScheduledStartTime of its start, instead of its input's
	// TaskID, which every run of the schedule shares: each run is a task
	// of its own, with its own turn, operation and delivery ids. Read once,
	// as the chain's first run starts, and only by a run a schedule
	// started; a continued run has the id in its input.
	changeScheduledTaskIDs = "scheduled-task-ids"
	// changeAbsentDeliveriesRetried: a delivery (the Slack post or comment
	// of the final answer) a reconciler confirmed absent after each of its
	// three sends is not dead-lettered at once: like a write under
	// changeAbsentWritesRetried it is a dependency that keeps failing, and
	// is sent again with the same operation id after the same jittered
	// backoff (1 s doubling to 5 min), each send settled as the first
	// (unknown → a look-up through the window), until the task's
	// DependencyOutageLimit has passed since it was first unknown; then it
	// is dead-lettered and the task fails delivery_failed, as before.
	// Every send still follows a whole window in which it was not seen.
	// Found by the game day (TestLongGameDay): a Slack post answered 502
	// three times in a row failed a task whose work was done. No recorded
	// history yet (the next label's). Read where the verdict forks.
	changeAbsentDeliveriesRetried = "absent-deliveries-retried"
	// changeAllThroughV13: as changeAllThroughWorkerLimits did for the
	// changes before it, one marker, read first as a task's run starts,
	// saying that every change above is in effect at its newest version
	// (changeAllThroughWorkerLimits and what it covers too) and that the run's starter set its search attributes
	// in the start (startAttributesHold), so the run upserts them only
	// where they differ. Each GetVersion records a marker and a
	// TemporalChangeVersion search-attribute update: a task started since
	// records one of each instead of one per change, ten events fewer at
	// its start and more where later changes fork. A task started before
	// has no such marker and reads each change as it did (task.since).
	changeAllThroughV13 = "all-changes-v13"

	// changeApprovalsBound: an approval binds to the canonical call
	// (docs/design.md §5.9). An operation that waits for approval records
	// its call's hash (OperationRecord.CallHash); the current details and
	// the Slack notice show the call, each field capped, and the hash; an
	// approve must carry the hash (the validator and the handler refuse
	// another) and the ExecuteTool that sends is checked against it. And
	// what was sent stays sent: before a person is asked, and when the
	// task is cancelled while one would be, the ledger is asked about the
	// operation (ExecuteTool with LedgerOnly), so one that a reset left
	// waiting after it was sent is answered as replayed, or reconciled,
	// never asked for again nor called "not sent". Read where an operation
	// first waits for approval, on its own marker, by stamped tasks too: a
	// stamp cannot tell this code's start from a v14 worker's, which
	// records no marker either, so CurrentLogic stays LogicUnmarked and
	// only a task that asks records it.
	changeApprovalsBound = "approvals-bound"

	// changeSearchFlags: a task says that it needs a person, awaits an
	// approval or dead-lettered a delivery in one KeywordList search
	// attribute, CapstanFlags (FlagNeedsHuman, FlagAwaitingApproval,
	// FlagDeadLetter), instead of the Bools CapstanNeedsHuman,
	// CapstanAwaitingApproval and CapstanDeadLetter, all three Bools SQL
	// visibility allows a namespace (docs/design.md §9.2); its start no
	// longer sets CapstanNeedsHuman = false (StartAttributes). Read on its
	// own marker where a run first sets a flag (task.flagsOnList), by
	// stamped tasks too, as changeApprovalsBound is: only a task that
	// asks or dead-letters records it. A run that set a Bool before the
	// change keeps setting and clearing the Bools to its end.
	changeSearchFlags = "search-flags"
)

// inEffect reports whether change, one of those through
// changeLimitsFromWorker, holds for this run of the task: at once for a run
// that read changeAllThroughWorkerLimits as it started, else by the
// change's own marker (workflow.GetVersion, read where the logic forks).
func (t *task) inEffect(ctx workflow.Context, change string) bool {
	return t.allThroughWorkerLimits || t.since(ctx, change)
}

// since reports whether change, one made after changeAllThroughWorkerLimits,
// holds for this run of the task: at once for a run that read
// changeAllThroughV13 as it started, else by the change's own marker
// (workflow.GetVersion, read where the logic forks).
func (t *task) since(ctx workflow.Context, change string) bool {
	return t.allThroughV13 || workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// A Change is one GetVersion change id of AgentTask, as `starter versions`
// reports on it.
type Change struct {
	// ID is the change id histories record.
	ID string
	// CoveredBy is the umbrella marker that also puts the change in effect
	// (changeAllThroughWorkerLimits, changeAllThroughV13); empty when only
	// its own marker does.
	CoveredBy string
	// OwnMarkerOnly: the change is in effect only where its own marker
	// is, even in a run that started unmarked (LogicUnmarked) — a change
	// made after the stamp's level.
	OwnMarkerOnly bool
}

// Changes are every change id above, oldest first (TestChangesListsEvery
// checks the list against the declarations).
var Changes = []Change{
	{ID: changeOperationIDByPosition, CoveredBy: changeAllThroughWorkerLimits},
	{ID: changeReconcileUnknown, CoveredBy: changeAllThroughWorkerLimits},
	{ID: changeWorkflowWaitsOutBreakers, CoveredBy: changeAllThroughWorkerLimits},
	{ID: changeFullTurnGuard, CoveredBy: changeAllThroughWorkerLimits},
	{ID: changeLimitsFromWorker, CoveredBy: changeAllThroughWorkerLimits},
	{ID: changeAllThroughWorkerLimits, CoveredBy: changeAllThroughV13},
	{ID: changeCancelSettlesEveryUnknown, CoveredBy: changeAllThroughV13},
	{ID: changeResolveOnce, CoveredBy: changeAllThroughV13},
	{ID: changeLedgerOutageWaits, CoveredBy: changeAllThroughV13},
	{ID: changeLedgerKeysPerChain, CoveredBy: changeAllThroughV13},
	{ID: changePolicyAtToolBoundary, CoveredBy: changeAllThroughV13},
	{ID: changeBudgets, CoveredBy: changeAllThroughV13},
	{ID: changeTruncateWaitsForLedger, CoveredBy: changeAllThroughV13},
	{ID: changeAbsentWritesRetried, CoveredBy: changeAllThroughV13},
	{ID: changeApprovals, CoveredBy: changeAllThroughV13},
	{ID: changePolicyByReference, CoveredBy: changeAllThroughV13},
	{ID: changeMCPToolsPinned, CoveredBy: changeAllThroughV13},
	{ID: changeSettleBySending, CoveredBy: changeAllThroughV13},
	{ID: changeScheduledTaskIDs, CoveredBy: changeAllThroughV13},
	{ID: changeAbsentDeliveriesRetried, CoveredBy: changeAllThroughV13},
	{ID: changeAllThroughV13},
	{ID: changeApprovalsBound, OwnMarkerOnly: true},
	{ID: changeSearchFlags, OwnMarkerOnly: true},
}
