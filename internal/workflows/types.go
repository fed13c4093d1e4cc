package workflows

import (
	"time"

	"github.com/capstanhq/capstan"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// AgentTaskInput starts a task. It carries no secret: tokens and keys live in
// the workers' environment.
type AgentTaskInput struct {
	TaskID string `json:"task_id"`
	Tenant string `json:"tenant"`
	// Priority is the task's priority at start, 1 (highest) to 5, 0 for
	// the server's default: the starter gives it, with the tenant as the
	// fairness key, to the start (the server passes it to every workflow
	// and activity task of the task). The workflow does not read it.
	Priority int `json:"priority,omitempty"`
	// Logic is the AgentTask logic the starter knows (CurrentLogic): from
	// LogicUnmarked on, a run whose first step runs on such code records
	// no GetVersion marker as it starts (readLogic); zero for a starter
	// before it, whose tasks record one as before. Not an argument of the
	// task: `starter run --id` leaves it out of what it compares.
	Logic        int    `json:"logic,omitempty"`
	Prompt       string `json:"prompt"`
	Repo         string `json:"repo,omitempty"` // owner/name the agent works on
	Base         string `json:"base,omitempty"` // base branch, default main
	SlackChannel string `json:"slack_channel,omitempty"`
	// Comments are GitHub issues or pull requests that also receive the
	// final answer, as comments, after the Slack channel.
	Comments []contract.CommentTarget `json:"comments,omitempty"`
	Model    string                   `json:"model"` // provider:model
	// Fallbacks are further models (provider:model), in order. A turn
	// whose overload budget is spent, or whose attempt ran past its total
	// limit, switches once to the next model of the list; the task stays
	// on it for its later turns (docs/design.md §4.4).
	Fallbacks []string `json:"fallbacks,omitempty"`
	// Persistent retries an overloaded provider for up to 6 h instead of
	// 5 attempts, each wait capped at 5 min and journalled at least every
	// 30 s: for unattended runs that would rather wait than fail.
	Persistent bool `json:"persistent,omitempty"`
	MaxTurns   int  `json:"max_turns,omitempty"`
	// ModelLimits are the watchdogs of every model attempt; zero fields
	// take config.DefaultModelLimits. The activity enforces them and the
	// workflow derives the activity's timeouts from them.
	ModelLimits model.Limits `json:"model_limits"`
	// ReconcileWindow bounds how long an unseen effect counts as "not yet"
	// before it is absent; zero means config.DefaultReconcileWindow.
	ReconcileWindow time.Duration `json:"reconcile_window,omitempty"`
	// DependencyOutageLimit bounds how long a tool write confirmed absent
	// is executed again, with backoff, before the task fails
	// dependency_unavailable (since changeAbsentWritesRetried); zero means
	// config.DefaultDependencyOutageLimit.
	DependencyOutageLimit time.Duration `json:"dependency_outage_limit,omitempty"`
	// HumanTimeout bounds the wait for a person to resolve an operation;
	// zero means config.DefaultHumanTimeout.
	HumanTimeout time.Duration `json:"human_timeout,omitempty"`
	// ApprovalTimeout bounds the wait for a person's approval of an
	// operation (starter run --approval-timeout, CAPSTAN_APPROVAL_TIMEOUT);
	// unanswered, the operation is denied. Zero means
	// config.DefaultApprovalTimeout.
	ApprovalTimeout time.Duration `json:"approval_timeout,omitempty"`
	// Approvers, when set, are the only names (--as) whose approve or
	// deny the task takes (CAPSTAN_APPROVERS, read by the starter): the
	// updates' validator refuses anyone else, so no client of Temporal
	// goes around it. Empty: anyone may answer.
	Approvers []string `json:"approvers,omitempty"`
	// Policy is the task's policy context, fixed by the starter
	// (docs/design.md §5.8): every tool call is decided against it before
	// anything is sent. Nil for a task started without one: the workflow
	// then derives the defaults' context from Repo, Comments, Base and
	// Tenant (taskPolicy).
	Policy *contract.TaskPolicy `json:"policy,omitempty"`
	// Budget is the task's ceiling on what its model requests spend;
	// zero fields take the worker's (CAPSTAN_MAX_TOKENS_PER_TASK,
	// CAPSTAN_MAX_COST_PER_TASK) at its start, since changeBudgets.
	Budget contract.Budget `json:"budget,omitzero"`
	// Prices are the prices of the task's models, taken from its first
	// worker's table with its budget.
	Prices map[string]config.Price `json:"prices,omitempty"`
	// Tools are the MCP tools, with their schema hashes, of the worker
	// that ran the task's first step (changeMCPToolsPinned): the task
	// offers only these, and refuses a call of one whose schema changed.
	// Nil for a task started before (its model is offered each worker's
	// tools as they are).
	Tools *contract.ToolSet `json:"tools,omitempty"`
	// MCPClient is the MCP client that started the task through `starter
	// mcp serve`'s run_task, and the connection it came over; nil for a task
	// started otherwise. A record for people and for mcp serve, whose
	// approve_task and deny_task answer only for the tasks their own
	// connection started; the workflow does not read it.
	MCPClient *MCPClient `json:"mcp_client,omitempty"`
	// Checkpoint is set when the task continues as new.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// MCPClient names the MCP client that started a task: Name and Version
// from the clientInfo of its initialize request (self-declared, so they
// prove nothing), and Connection, the id `starter mcp serve` gave the
// connection, which no other connection has.
type MCPClient struct {
	Name       string `json:"name"`
	Version    string `json:"version,omitempty"`
	Connection string `json:"connection"`
}

// Checkpoint is what a task carries across continue-as-new: the transcript by
// reference and the records of what already happened.
type Checkpoint struct {
	NextTurn   int        `json:"next_turn"`
	Transcript string     `json:"transcript"`
	Append     []string   `json:"append,omitempty"`
	Result     TaskResult `json:"result"`
	Journal    []string   `json:"journal,omitempty"`
	// ModelIndex is the model the task is on: 0 the primary, i the i-th
	// fallback.
	ModelIndex int `json:"model_index,omitempty"`
	// Scope is the chain's ledger scope (ChainScope); empty for a chain
	// started before changeLedgerKeysPerChain, which keeps unscoped keys.
	Scope string `json:"scope,omitempty"`
	// Policy: the chain decides its tool calls against its policy
	// context (changePolicyAtToolBoundary), read as its first run began.
	Policy bool `json:"policy,omitempty"`
	// Approvals: the chain asks a person to approve what its policy
	// requires approval for (changeApprovals), read as its first run
	// began; Answered are the answers given so far, by effect
	// (contract.AwaitingApproval.Effect), which the same effect asked
	// again gets without anyone being asked.
	Approvals bool                      `json:"approvals,omitempty"`
	Answered  map[string]ApprovalRecord `json:"answered,omitempty"`
}

// TaskResult is the outcome of a task, and its status while it runs (the
// status query). It is the JSON object `starter run --wait --json` prints.
type TaskResult struct {
	TaskID      string            `json:"task_id"`
	WorkflowID  string            `json:"workflow_id"`
	Status      Status            `json:"status"`
	FailureCode FailureCode       `json:"failure_code"`
	Message     string            `json:"message"`
	FinalText   string            `json:"final_text"`
	Model       string            `json:"model"`
	Turns       []TurnRecord      `json:"turns"`
	Operations  []OperationRecord `json:"operations"`
	Deliveries  []DeliveryRecord  `json:"deliveries"`
	// Waiting says what a running task waits for right now, when it waits
	// for a circuit breaker: "waiting 24s for breaker github/write (until
	// 12:00:34 UTC)". Empty otherwise.
	Waiting string `json:"waiting,omitempty"`
	// Spend is what the task's model requests have spent, against its
	// budget; nil for a task started before changeBudgets.
	Spend *Spend `json:"spend,omitempty"`
	// Notices are the Slack messages that asked for an approval
	// (docs/design.md §5.9), one per operation that waited, each a
	// delivery of its own; empty without a Slack channel.
	Notices []DeliveryRecord `json:"notices,omitempty"`
}

// TurnRecord lists the attempts of one turn.
type TurnRecord struct {
	TurnID   string          `json:"turn_id"`
	Attempts []AttemptRecord `json:"attempts"`
}

// AttemptRecord is one model request: how it ended and how far it got.
type AttemptRecord struct {
	AttemptID string `json:"attempt_id"`
	// Model is the provider:model the attempt asked, set since
	// changeFullTurnGuard (a fallback may have taken the turn over).
	Model      string        `json:"model,omitempty"`
	Outcome    model.Outcome `json:"outcome"`
	Phase      model.Phase   `json:"phase"`
	HTTPStatus int           `json:"http_status"`
	Message    string        `json:"message,omitempty"`
}

// OperationRecord is one tool call's operation.
type OperationRecord struct {
	OperationID string          `json:"operation_id"`
	TurnID      string          `json:"turn_id"`
	ToolCallID  string          `json:"tool_call_id"`
	Tool        string          `json:"tool"`
	State       capstan.Outcome `json:"state"`
	ExternalID  string          `json:"external_id"`
	Replayed    bool            `json:"replayed"`
	// Recovered: the outcome was unknown and a reconciler (or a person)
	// found the effect had happened.
	Recovered bool `json:"recovered,omitempty"`
	// Reason says why the operation is unknown or needs_human, or how it
	// was recovered.
	Reason string `json:"reason,omitempty"`
	// ResolvedBy names the person whose resolve update settled the
	// operation (`starter resolve --as`); empty when nobody did.
	ResolvedBy string `json:"resolved_by,omitempty"`
	// PolicyRule names the rule of the task's policy that refused the
	// operation before anything was sent (its state failed, Reason the
	// rule's reason); empty for an operation the policy let through.
	PolicyRule string `json:"policy_rule,omitempty"`
	// Summary is one line saying what the operation does: the tool's
	// summary of the call, or, once it waited for approval, what it
	// would create and where ("pull request capstan/x → main in
	// acme/payments").
	Summary string `json:"summary,omitempty"`
	// Approval is the answer to the approval the operation waited for:
	// approved (then it was sent as any call) or denied (nothing was sent;
	// its state denied, Reason why). Nil when it needed none.
	Approval *ApprovalRecord `json:"approval,omitempty"`
	// CallHash is the SHA-256 of the canonical call the operation waited
	// for approval of (contract.CanonicalCall): an approve must carry it,
	// and what is sent is checked against it (changeApprovalsBound).
	// Arguments is the ledger reference of the call's arguments, where
	// `starter show TASK OP` reads the whole call.
	CallHash  string `json:"call_hash,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// ApprovalRecord is a person's answer to an operation that waited for
// approval (starter approve, starter deny), or the approval's timeout.
type ApprovalRecord struct {
	// Decision is approved or denied.
	Decision string `json:"decision"`
	// By names the person (--as, by default user@host); empty for the
	// timeout.
	By   string `json:"by,omitempty"`
	Note string `json:"note,omitempty"`
	// Reason is why it was denied: the person's --reason, or "no approval
	// within …".
	Reason string `json:"reason,omitempty"`
	// Hash is the call's hash the approve carried (CallHash).
	Hash string `json:"hash,omitempty"`
	// Client is the Temporal client identity the answer's sender gave
	// (ApprovalRequest.Client), recorded beside By for audit: like By it
	// is set by the sender, so it proves nothing.
	Client string `json:"client,omitempty"`
	// Again: the same effect had been answered earlier in the task, and
	// this operation got that answer without anyone being asked.
	Again bool `json:"again,omitempty"`
}

// DeliveryRecord is one delivery of the final answer.
type DeliveryRecord struct {
	OperationID string `json:"operation_id"`
	Target      string `json:"target"`
	// State is what is known of the delivery (docs/design.md §6):
	// declared, running while it is posted, succeeded, unknown,
	// reconciling, absent (confirmed not posted; sent again while tries
	// remain), needs_human, or failed once given up (dead-lettered).
	State      capstan.Outcome `json:"state"`
	ExternalID string          `json:"external_id,omitempty"`
	// Tries counts the sends after the first that a reconciler allowed.
	Tries int `json:"tries,omitempty"`
	// Recovered: the outcome was unknown and a reconciler (or a person)
	// found the message had been posted.
	Recovered bool `json:"recovered,omitempty"`
	// ResolvedBy names the person whose resolve update settled the
	// delivery; empty when nobody did.
	ResolvedBy string `json:"resolved_by,omitempty"`
}
