package contract

import (
	"strings"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// Activity names: the methods of activities.Activities, which the worker
// registers under their method names, and which the workflow schedules by
// these names (so it needs no reference to the activities' code).
const (
	ActivityModelTurn          = "ModelTurn"
	ActivityExecuteTool        = "ExecuteTool"
	ActivityDeliver            = "Deliver"
	ActivityReconcile          = "Reconcile"
	ActivityTruncateTranscript = "TruncateTranscript"
	// ActivityWorkerLimits runs as a local activity.
	ActivityWorkerLimits = "WorkerLimits"
)

// ModelTurnInput asks for one attempt of one turn. The transcript travels by
// reference: Transcript names the manifest of committed items, Append the
// items committed since (tool results), and Seed the opening messages of a
// task's first turn. History therefore grows by a constant per turn.
type ModelTurnInput struct {
	TaskID string
	// Scope is the task's chain scope (workflows.ChainScope): the
	// activity records it with every ledger row it writes, so retention
	// knows whose rows they are. Empty for tasks started before
	// ledger keys were scoped.
	Scope     string `json:",omitempty"`
	TurnID    string
	AttemptID string
	Model     string // "provider:model"
	// Limits are the attempt's watchdogs; zero fields take the defaults.
	// The workflow sets the activity's timeouts from the same value.
	Limits     model.Limits
	Transcript string // manifest ref; empty on the first turn
	Append     []string
	Seed       []model.Message
	// Compact asks, instead of the turn's answer, for a summary of the
	// transcript's oldest items (docs/design.md §4.4, overflow): the
	// result's Transcript has them replaced by the summary, and Compacted
	// says how many; zero when there was nothing to compact.
	Compact bool `json:",omitempty"`
	// Policy is the task's policy context (changePolicyAtToolBoundary):
	// the tools it refuses whatever their arguments are not offered to the
	// model. Nil offers every tool.
	Policy *TaskPolicy `json:",omitempty"`
	// Tools is the task's fixed set of MCP tools (changeMCPToolsPinned):
	// an MCP tool not in it is not offered, and a call of one records the
	// schema hash it was fixed with. Nil (a task started before, or a
	// worker without MCP tools at its start) offers the worker's tools as
	// they are.
	Tools *ToolSet `json:",omitempty"`
}

// ModelTurnResult is the committed output of a completed attempt.
type ModelTurnResult struct {
	AttemptID    string
	Transcript   string // manifest ref including the assistant item
	Text         string
	ToolCalls    []ToolCallRef
	FinishReason string
	// Usage is what the attempt spent: the provider's reported usage, or,
	// when it reported none, the estimate of AttemptReport.Usage
	// (UsageEstimated).
	Usage          model.Usage
	UsageEstimated bool `json:",omitempty"`
	Phase          model.Phase
	Events         int
	// Replayed: the turn had already committed (a redelivered activity, a
	// reset); this is its recorded output and the model was not called.
	Replayed bool `json:",omitempty"`
	// Compacted is, for a Compact call, the number of transcript items the
	// summary replaced.
	Compacted int `json:",omitempty"`
}

// ToolCallRef is a committed tool call as the workflow needs it to declare
// the operation: its identity, but not its arguments, which stay in the
// ledger (a file's content must not be copied into history twice).
type ToolCallRef struct {
	ID          string // the model's tool_call_id
	Name        string
	Class       string // a capstan.Class
	BusinessKey string // empty when the tool has none
	Arguments   string // ref of the arguments in the ledger
	Summary     string // what the Temporal UI shows for the call
	// SchemaHash is, for a tool whose schema its server may change (an MCP
	// tool), the hash of the input schema the model was offered and its
	// arguments were checked against; ExecuteTool refuses the call if the
	// tool's schema is another by then. Empty for the built-in tools.
	SchemaHash string `json:",omitempty"`
}

// AttemptReport describes an attempt that did not complete; it is the detail
// of an ErrTypeModelAttempt application error and of a heartbeat.
type AttemptReport struct {
	AttemptID    string        `json:"attempt_id"`
	Outcome      model.Outcome `json:"outcome"`
	Phase        model.Phase   `json:"phase"`
	HTTPStatus   int           `json:"http_status,omitempty"`
	RetryAfterMS int64         `json:"retry_after_ms,omitempty"`
	// Breaker names the breaker of a breaker_open attempt: the provider's,
	// or "ledger" when the ledger could not be read or written.
	Breaker string `json:"breaker,omitempty"`
	// OutageLimitMS, of an attempt the ledger's breaker kept, is
	// BreakerWait.OutageLimit in milliseconds.
	OutageLimitMS int64  `json:"outage_limit_ms,omitempty"`
	Message       string `json:"message,omitempty"`
	// Usage is what the attempt spent (docs/design.md §11.4): once its
	// request may have been sent, an estimate — its input's characters / 4
	// as input tokens (UsageEstimated) — since an attempt that did not
	// complete has no usage the provider reported; zero while nothing was
	// sent. Heartbeats carry it too, so a lost worker's attempt counts.
	Usage          model.Usage `json:"usage,omitzero"`
	UsageEstimated bool        `json:"usage_estimated,omitempty"`
	Events         int         `json:"events"`
	Chars          int         `json:"chars"`
	PreviewTail    string      `json:"preview_tail,omitempty"`
	// StreamURL is where followers read this attempt's text live (the
	// worker's livestream hub); empty when the worker serves none.
	StreamURL string `json:"stream_url,omitempty"`
}

// ExecuteToolInput asks for one operation. OperationID was fixed by the
// workflow; every retry of the same intent carries the same one.
type ExecuteToolInput struct {
	Tenant string
	TaskID string
	// Scope is the task's chain scope (workflows.ChainScope): the
	// activity records it with every ledger row it writes, so retention
	// knows whose rows they are. Empty for tasks started before
	// ledger keys were scoped.
	Scope       string `json:",omitempty"`
	TurnID      string
	OperationID string
	ToolCallID  string
	Tool        string
	Arguments   string // ref of the arguments in the ledger
	// Policy is the task's policy context, fixed when it started: the
	// activity decides the call against it before anything is claimed or
	// sent (docs/design.md §5.8). Nil for a task started before
	// changePolicyAtToolBoundary, whose calls are not decided.
	Policy *TaskPolicy `json:",omitempty"`
	// Approvals says the workflow can ask a person for an approval
	// (changeApprovals, docs/design.md §5.9): a require_approval decision
	// on a call that carries neither Approval nor Denial claims nothing,
	// sends nothing and returns State awaiting_approval with Awaiting.
	// False, such a decision refuses the call, as before approvals.
	Approvals bool `json:",omitempty"`
	// Approval is a person's approval of this operation: the policy's
	// require_approval decision then lets the call through, and it is
	// claimed and sent as any allowed call, exactly once.
	Approval *Approval `json:",omitempty"`
	// Denial is a person's denial of this operation, or the approval's
	// timeout: nothing is claimed or sent; the denial is committed as the
	// tool message the model reads, and State is denied.
	Denial *Denial `json:",omitempty"`
	// LedgerOnly asks only what the ledger holds of the operation: a
	// succeeded one is answered as replayed, a claimed one whose outcome
	// is not known as unknown, and one never claimed as absent; nothing is
	// decided, claimed or sent (docs/design.md §5.9: what was sent stays
	// sent, asked as a task is cancelled while the operation waits for
	// approval).
	LedgerOnly bool `json:",omitempty"`
}

// ExecuteToolResult is how the operation ended. A tool that refused the
// request (a definite 4xx, invalid arguments) is not an activity failure: the
// model is told, State is failed, and Item carries the message.
type ExecuteToolResult struct {
	OperationID string
	State       capstan.Outcome // succeeded, failed, awaiting_approval or denied
	ExternalID  string
	Replayed    bool   // the ledger already held succeeded; nothing was sent
	Item        string // ref of the tool message committed to the transcript
	Preview     string // first characters of the output, for the UI
	// Decision is the task's policy's decision on the call; nil when the
	// task has no policy context (Policy nil) or the call was replayed.
	Decision *PolicyDecision `json:",omitempty"`
	// Awaiting is set, with State awaiting_approval, when the call waits
	// for a person's approval: nothing was claimed or sent, and Item is
	// empty.
	Awaiting *AwaitingApproval `json:",omitempty"`
}

// DeliverInput asks to post the final answer to one target.
type DeliverInput struct {
	Tenant string
	TaskID string
	// Scope is the task's chain scope (workflows.ChainScope): the
	// activity records it with every ledger row it writes, so retention
	// knows whose rows they are. Empty for tasks started before
	// ledger keys were scoped.
	Scope       string `json:",omitempty"`
	OperationID string
	Channel     string // Slack channel name or id; empty for a comment
	// Comment, when set, delivers the text as a comment on a GitHub issue
	// or pull request instead of a Slack message.
	Comment *CommentTarget `json:",omitempty"`
	Text    string
}

// ApprovalNoticeMark is what the operation id of an approval notice has
// after the id of the operation it is about, followed by the operation's
// place among the task's operations ("<op>:approval-notice:<n>",
// workflows' noticeApproval). Deliver tells a notice from a final answer
// by it (IsApprovalNotice).
const ApprovalNoticeMark = ":approval-notice:"

// IsApprovalNotice reports whether a delivery's operation id is an
// approval notice's: Deliver posts a notice, which quotes the arguments of
// a call, as plain text, and a final answer as mrkdwn.
func IsApprovalNotice(operationID string) bool {
	return strings.Contains(operationID, ApprovalNoticeMark)
}

// CommentTarget is a GitHub issue or pull request that receives a task's
// final answer as a comment.
type CommentTarget struct {
	Repo   string // owner/name
	Number int
}

// CommentArguments are the github_comment arguments of a comment delivery
// (ghref.CommentArguments). The workflow names them by their ledger
// reference (ledger.ItemRef) so a reconciler can read them, and Deliver
// stores them; both build them here, so the bytes, and the reference, are
// the same.
func CommentArguments(target CommentTarget, text string) []byte {
	return ghref.CommentArguments(target.Repo, target.Number, text)
}

// DeliverResult is an acknowledged delivery.
type DeliverResult struct {
	OperationID string
	ExternalID  string // "<channel>/<ts>"
	Replayed    bool
}

// ReconcileInput asks what became of an operation whose outcome is unknown.
type ReconcileInput struct {
	Tenant string
	TaskID string
	// Scope is the task's chain scope (workflows.ChainScope): the
	// activity records it with every ledger row it writes, so retention
	// knows whose rows they are. Empty for tasks started before
	// ledger keys were scoped.
	Scope       string `json:",omitempty"`
	OperationID string
	// ToolCallID is set for a tool operation: a found operation commits a
	// tool message for it, telling the model the operation was recovered.
	ToolCallID string
	// Since is when the workflow began reconciling this operation, by the
	// workflow's clock. Reconcile no longer reads it: the consistency
	// window runs from the ledger's record of the send, on the ledger's
	// clock (docs/design.md §5.5), since a worker's clock may disagree
	// with the workflow's by minutes. The workflow still sets it, as its
	// recorded histories do.
	Since time.Time
	// Window is the consistency window; zero means
	// config.DefaultReconcileWindow.
	Window time.Duration
	// Resolution, when set, is a person's verdict on an operation that
	// needs one: Reconcile records it instead of asking the external
	// system.
	Resolution *Resolution
	// Arguments is the ref of the tool's arguments in the ledger (the
	// ToolCallRef's Arguments) for a tool operation: the reconciler reads
	// what to look for from them. Empty for a delivery.
	Arguments string
	// Channel is the Slack channel a delivery was posted to, as Deliver was
	// given it. Empty for a tool operation.
	Channel string
	// Resend lets the reconciler settle a conditional write whose service
	// refuses a second effect (tools.Settler: a pull request, a branch) by
	// sending it again with the same operation id once its lookup saw
	// nothing, instead of waiting out the window (docs/design.md §5.5).
	// The workflow sets it for a running task's tool operation since
	// changeSettleBySending; never for a cancelled task's, which sends
	// nothing more. False: look only.
	Resend bool `json:",omitempty"`
}

// Resolution is what a person decided about an operation nobody else could
// tell (the workflow's resolve update).
type Resolution struct {
	Verdict    capstan.Verdict // found or absent
	ExternalID string          // found: the URL the person saw
	// ResolvedBy names the person; empty in the resolutions of tasks
	// started before it, which the JSON leaves out.
	ResolvedBy string `json:",omitempty"`
}

// ReconcileResult is a final verdict, recorded in the ledger under a new
// fence before it is returned.
type ReconcileResult struct {
	OperationID string
	Verdict     capstan.Verdict // found, absent or indeterminate
	State       capstan.Outcome // succeeded, absent or needs_human
	ExternalID  string          // what was found (a PR URL, a message ts)
	Reason      string          // one sentence: what was asked and seen
	Item        string          // found tool operation: ref of the tool message
	Asked       int             // how many times the external system was asked
}

// TruncateInput asks to cut a transcript that overflowed the model's
// context: the transcript as the overflowing attempt saw it.
type TruncateInput struct {
	TaskID string
	// Scope is the task's chain scope (workflows.ChainScope): the
	// activity records it with every ledger row it writes, so retention
	// knows whose rows they are. Empty for tasks started before
	// ledger keys were scoped.
	Scope      string `json:",omitempty"`
	TurnID     string // the compaction's turn id, for the logs
	Transcript string
	Append     []string
	Seed       []model.Message
}

// TruncateResult is the cut transcript: a manifest whose oldest items are
// replaced by one marker item. Removed is zero, and Transcript empty, when
// there was nothing to remove.
type TruncateResult struct {
	Transcript string
	Removed    int
}

// WorkerLimitsInput asks for the worker's default limits.
type WorkerLimitsInput struct{}

// WorkerLimitsResult holds the worker's default limits (CAPSTAN_MODEL_* and
// CAPSTAN_HEARTBEAT_TIMEOUT), every field set but FirstEvent, which is zero
// unless the worker sets a first-event wait apart from its idle timeout.
type WorkerLimitsResult struct {
	Limits model.Limits `json:"limits"`
	// Budget is the worker's budget for a task that sets none
	// (CAPSTAN_MAX_TOKENS_PER_TASK, CAPSTAN_MAX_COST_PER_TASK), and
	// Prices its price table (CAPSTAN_MODEL_PRICES), by provider:model.
	Budget Budget                  `json:"budget,omitzero"`
	Prices map[string]config.Price `json:"prices,omitempty"`
	// Tools are the worker's tools whose schema their server may change
	// (MCP tools), each with the hash of its schema now: a task started
	// since changeMCPToolsPinned keeps them as its ToolSet.
	Tools []ToolPin `json:"tools,omitempty"`
}

// ToolPin is one tool of a task's fixed set, with the hash of the input
// schema it had when the task started.
type ToolPin struct {
	Name       string `json:"name"`
	SchemaHash string `json:"schema_hash"`
}

// ToolSet is the set of tools with changeable schemas (MCP tools) a task
// fixed when it started, recorded in its input: only these are offered to
// its model, and a call of one whose schema is another by then is refused.
type ToolSet struct {
	Pins []ToolPin `json:"pins"`
}

// Pin returns the pin of the tool called name.
func (s *ToolSet) Pin(name string) (ToolPin, bool) {
	if s == nil {
		return ToolPin{}, false
	}
	for _, p := range s.Pins {
		if p.Name == name {
			return p, true
		}
	}
	return ToolPin{}, false
}

// Budget is a task's ceiling on what its model requests spend
// (docs/design.md §11.4); a zero field sets no ceiling of that kind.
type Budget struct {
	MaxTokens  int64   `json:"max_tokens,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
}

// Under fills the fields b leaves unset from def.
func (b Budget) Under(def Budget) Budget {
	if b.MaxTokens <= 0 {
		b.MaxTokens = def.MaxTokens
	}
	if b.MaxCostUSD <= 0 {
		b.MaxCostUSD = def.MaxCostUSD
	}
	return b
}
