package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
)

// Query names.
const (
	QueryStatus  = "status"
	QueryJournal = "journal"
)

// Search attributes capstan sets on every task (docs/design.md §9.2).
var (
	AttrStatus     = temporal.NewSearchAttributeKeyKeyword("CapstanStatus")
	AttrUnknownOps = temporal.NewSearchAttributeKeyInt64("CapstanUnknownOps")
	AttrRepo       = temporal.NewSearchAttributeKeyKeyword("CapstanRepo")
	// AttrNeedsHuman is true while the task waits for a person to resolve
	// an operation. Since changeSearchFlags, FlagNeedsHuman in AttrFlags
	// says it instead; a task started before still sets this Bool.
	AttrNeedsHuman = temporal.NewSearchAttributeKeyBool("CapstanNeedsHuman")
	// AttrDeadLetter is set when a delivery was given up (docs/design.md
	// §6). Since changeSearchFlags, FlagDeadLetter says it instead.
	AttrDeadLetter = temporal.NewSearchAttributeKeyBool("CapstanDeadLetter")
	// AttrAwaitingApproval is true while an operation of the task waits
	// for a person's approval (docs/design.md §5.9; starter list
	// --awaiting-approval). Since changeSearchFlags, FlagAwaitingApproval
	// says it instead.
	AttrAwaitingApproval = temporal.NewSearchAttributeKeyBool("CapstanAwaitingApproval")
	// AttrTenant is the task's tenant (AgentTaskInput.Tenant), set by the
	// starter in the task's start options, never by the workflow.
	AttrTenant = temporal.NewSearchAttributeKeyKeyword("CapstanTenant")
)

// SearchAttributes are every attribute a task has, set by AgentTask or at
// its start; a namespace must have them registered before a task starts.
// They fit SQL visibility's per-namespace limits with room to spare
// (docs/design.md §9.2): three Keywords of ten, one Int of three, one
// KeywordList of three, no Bool (TestSearchAttributesLeaveRoom). The Bools
// tasks set before changeSearchFlags (LegacySearchAttributes) are not
// among them.
var SearchAttributes = []temporal.SearchAttributeKey{AttrStatus, AttrUnknownOps, AttrRepo, AttrFlags, AttrTenant}

// MissingSearchAttributes returns those of SearchAttributes that defined —
// a namespace's custom attributes by name, as ListSearchAttributes answers
// — lacks, in SearchAttributes' order. The worker registers them; the
// starter names them when a start is refused for one.
func MissingSearchAttributes[V any](defined map[string]V) []temporal.SearchAttributeKey {
	var missing []temporal.SearchAttributeKey
	for _, key := range SearchAttributes {
		if _, ok := defined[key.GetName()]; !ok {
			missing = append(missing, key)
		}
	}
	return missing
}

func fail(code FailureCode, format string, args ...any) error {
	return &taskError{code: code, msg: fmt.Sprintf(format, args...)}
}

// task is the state of one run of AgentTask.
type task struct {
	in         AgentTaskInput
	result     TaskResult
	journal    []string
	transcript string   // manifest ref of the committed transcript
	append     []string // tool results committed since the last turn
	nextTurn   int
	// waiting holds the operations that wait for a person; resolutions the
	// decisions the resolve update delivered and nobody has read yet.
	// declared lists every tool call given an operation id, so the end of
	// a cancelled task can reconcile what was in flight.
	declared    []declared
	waiting     map[string]bool
	resolutions map[string]ResolveRequest
	answered    resolveBook // who resolved what, and the worker's answer to a found (resolve.go)
	askedPerson bool        // the task asked a person to resolve an operation at least once
	flags       flagBook    // how this run says its flags, and which it holds (flags.go)
	// allThroughWorkerLimits: this run read changeAllThroughWorkerLimits
	// as it started, so every change through changeLimitsFromWorker holds
	// at its newest version (inEffect).
	allThroughWorkerLimits bool
	// allThroughV13: this run read changeAllThroughV13 as it started, so
	// every change since changeAllThroughWorkerLimits holds (since).
	allThroughV13 bool
	// fullTurnGuard: the task runs the whole turn guard
	// (changeFullTurnGuard): continuations, compaction, fallbacks,
	// persistent mode, sliced waits.
	fullTurnGuard bool
	// modelIndex is the model the task is on: 0 the primary, i the i-th
	// of in.Fallbacks. A switch keeps it for the rest of the task.
	modelIndex int
	// ledgerDownSince is when the task began waiting for its ledger in
	// the current outage (changeLedgerOutageWaits); zero when the ledger
	// last answered (ledgerBack).
	ledgerDownSince time.Time
	// budgets: the task keeps to a budget (changeBudgets); its spend is
	// result.Spend.
	budgets bool
	// scope is the chain's ledger scope (changeLedgerKeysPerChain), in
	// every ledger key the task makes; empty for a chain started before.
	scope string
	// policy: the chain decides its tool calls against its policy context,
	// t.in.Policy (changePolicyAtToolBoundary; policy.go).
	policy bool
	// approvals: the chain asks a person to approve what its policy
	// requires approval for (changeApprovals; approval.go), with the
	// state of those approvals.
	approvals bool
	approval  approvalBook
	// pinTools: the first run fixes the task's MCP tools in t.in.Tools
	// (changeMCPToolsPinned; limits.go).
	pinTools bool
}

// AgentTask runs one agent task: turns until the model answers without tool
// calls, each tool call as an operation, then the delivery of the answer.
func AgentTask(ctx workflow.Context, in AgentTaskInput) (TaskResult, error) {
	t := &task{in: in, nextTurn: 1, waiting: map[string]bool{}, resolutions: map[string]ResolveRequest{}}
	t.allThroughV13, t.allThroughWorkerLimits = readLogic(ctx, in)
	if cp := in.Checkpoint; cp != nil {
		t.result, t.transcript, t.append, t.nextTurn, t.journal = cp.Result, cp.Transcript, cp.Append, cp.NextTurn, cp.Journal
		t.modelIndex, t.scope, t.policy = cp.ModelIndex, cp.Scope, cp.Policy
		t.budgets = cp.Result.Spend != nil
		t.approvals, t.approval.answered = cp.Approvals, cp.Answered
	} else {
		if id := scheduledTaskID(ctx, t.allThroughV13); id != "" {
			t.in.TaskID = id
		}
		if t.since(ctx, changeLedgerKeysPerChain) {
			info := workflow.GetInfo(ctx)
			t.scope = ChainScope(info.Namespace, info.FirstRunID)
		}
		t.startPolicy(ctx)
		t.startApprovals(ctx)
		t.budgets = t.since(ctx, changeBudgets)
		t.pinTools = t.since(ctx, changeMCPToolsPinned)
		t.result = TaskResult{
			TaskID: t.in.TaskID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Model: in.Model,
			Turns: []TurnRecord{}, Operations: []OperationRecord{}, Deliveries: []DeliveryRecord{},
		}
	}
	t.result.Status = StatusRunning
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (TaskResult, error) { return t.result, nil }); err != nil {
		return t.result, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryJournal, func() ([]string, error) { return t.journal, nil }); err != nil {
		return t.result, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, t.progress); err != nil {
		return t.result, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResolve, t.resolve,
		workflow.UpdateHandlerOptions{Validator: t.validateResolve}); err != nil {
		return t.result, err
	}
	if err := t.setApprovalHandlers(ctx); err != nil {
		return t.result, err
	}
	if !t.allThroughV13 || !startAttributesHold(ctx, in) {
		if err := workflow.UpsertTypedSearchAttributes(ctx, StartAttributes(in)...); err != nil {
			return t.result, err
		}
	}
	if in.Checkpoint == nil {
		if err := t.settleLimits(ctx); err != nil {
			return t.finish(ctx, err)
		}
	}
	return t.finish(ctx, t.run(ctx))
}

// StartAttributes are the search attributes a task has as it starts:
// running, no unknown operation, its repository (and no flag: AttrFlags
// unset). The starter sets them in the start's options; a run that finds
// them there (changeAllThroughV13, startAttributesHold) does not upsert
// them again, which saves an event and a visibility write per task.
// Before changeSearchFlags they held CapstanNeedsHuman = false too, which
// a namespace need no longer define.
func StartAttributes(in AgentTaskInput) []temporal.SearchAttributeUpdate {
	attrs := []temporal.SearchAttributeUpdate{AttrStatus.ValueSet(string(StatusRunning)), AttrUnknownOps.ValueSet(0)}
	if in.Repo != "" {
		attrs = append(attrs, AttrRepo.ValueSet(in.Repo))
	}
	return attrs
}

// startAttributesHold reports whether the run started with the values
// StartAttributes gives it (read from its start, so the same on replay).
// CapstanNeedsHuman, which a starter before changeSearchFlags set false,
// may be absent or false; a start that set it true does not hold.
//
// A start without it (this code's starter) that a worker before
// changeSearchFlags ran first was upserted there (that code required it)
// and is not here: a pool that runs such workers beside this code's
// starter upgrades its workers first, or runs under Worker Versioning
// (docs/design.md §9.2).
func startAttributesHold(ctx workflow.Context, in AgentTaskInput) bool {
	sa := workflow.GetTypedSearchAttributes(ctx)
	status, okStatus := sa.GetKeyword(AttrStatus)
	needs, _ := sa.GetBool(AttrNeedsHuman)
	unknown, okUnknown := sa.GetInt64(AttrUnknownOps)
	if !okStatus || status != string(StatusRunning) || needs || !okUnknown || unknown != 0 {
		return false
	}
	if in.Repo == "" {
		return true
	}
	repo, ok := sa.GetKeyword(AttrRepo)
	return ok && repo == in.Repo
}

func (t *task) maxTurns() int {
	if t.in.MaxTurns > 0 {
		return t.in.MaxTurns
	}
	return config.DefaultMaxTurns
}

func (t *task) note(ctx workflow.Context, format string, args ...any) {
	line := workflow.Now(ctx).UTC().Format(time.RFC3339) + " " + fmt.Sprintf(format, args...)
	t.journal = append(t.journal, line)
	workflow.GetLogger(ctx).Info(fmt.Sprintf(format, args...), "task_id", t.in.TaskID)
}

func (t *task) run(ctx workflow.Context) error {
	t.fullTurnGuard = t.inEffect(ctx, changeFullTurnGuard)
	if err := t.probeBuild(ctx); err != nil {
		return err
	}
	first := t.nextTurn
	final, answered := "", false
	for turn := first; turn <= t.maxTurns(); turn++ {
		if turn > first && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			t.note(ctx, "continuing as new before turn %d", turn)
			next := t.in
			next.Checkpoint = &Checkpoint{NextTurn: turn, Transcript: t.transcript, Append: t.append, Result: t.result, Journal: t.journal, ModelIndex: t.modelIndex, Scope: t.scope, Policy: t.policy,
				Approvals: t.approvals, Answered: t.approval.answered}
			return workflow.NewContinueAsNewError(ctx, AgentTask, next)
		}
		out, err := t.runTurn(ctx, turn)
		if err != nil {
			return err
		}
		t.transcript, t.append = out.Transcript, nil
		if len(out.ToolCalls) == 0 {
			final, answered = out.Text, true
			break
		}
		items, err := t.runOperations(ctx, turn, out.ToolCalls)
		if err != nil {
			return err
		}
		t.append = items
	}
	if !answered {
		return fail(FailMaxTurns, "the model had not given a final answer after %d turns", t.maxTurns())
	}
	t.result.FinalText = final
	t.note(ctx, "final response committed (%d characters)", len(final))
	return t.deliver(ctx, final)
}

// seed is the opening of a task's transcript.
func (t *task) seed() []model.Message {
	sys := "You are capstan, an agent that changes code on GitHub through tools. " +
		"Every tool call that changes something is recorded and happens at most once; " +
		"when a tool reports an error, read it and adapt rather than repeating the same call. " +
		"When the work is done, answer with a short summary and no tool calls."
	sys += "\nTask id: " + t.in.TaskID
	if t.in.Repo != "" {
		base := t.in.Base
		if base == "" {
			base = config.DefaultBaseBranch
		}
		sys += fmt.Sprintf("\nRepository: %s. Base branch: %s.", t.in.Repo, base)
	}
	return []model.Message{{Role: model.RoleSystem, Content: sys}, {Role: model.RoleUser, Content: t.in.Prompt}}
}
