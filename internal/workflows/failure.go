package workflows

// Status is where a task stands. A task ends completed, failed or
// cancelled; while it runs its status is running (or needs_human while it
// waits for a person).
type Status string

// Task statuses.
const (
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	// StatusNeedsHuman: the task waits for a person to resolve an
	// operation nobody else can tell (starter resolve).
	StatusNeedsHuman Status = "needs_human"
)

// FailureCode says why a task failed (docs/design.md §7.1). Every failed task carries
// exactly one, with one readable sentence in TaskResult.Message; in the
// Temporal UI the workflow fails with the code as its error type. These are
// all the codes a task can end with: a new way to fail is a new constant
// here, never a string literal elsewhere.
type FailureCode string

// Failure codes.
const (
	FailModelIdleTimeout    FailureCode = "model_idle_timeout"
	FailModelMaxDuration    FailureCode = "model_max_duration"
	FailModelInvalidOutput  FailureCode = "model_invalid_output"
	FailProviderRejected    FailureCode = "provider_rejected"
	FailProviderUnavailable FailureCode = "provider_unavailable"
	FailContextOverflow     FailureCode = "context_overflow"
	// FailModelOutputTruncated: the final answer was still cut by the
	// model's output token limit after maxContinuations continuations; it
	// is never delivered incomplete.
	FailModelOutputTruncated FailureCode = "model_output_truncated"
	FailWorkerLost           FailureCode = "worker_lost"
	FailMaxTurns             FailureCode = "max_turns"
	FailOperationConflict    FailureCode = "operation_conflict"
	FailOperationUnknown     FailureCode = "operation_unknown"
	FailOperationFailed      FailureCode = "operation_failed"
	FailDeliveryFailed       FailureCode = "delivery_failed"
	FailWorkerMisconfigured  FailureCode = "worker_misconfigured"
	// FailInvalidLimits: the limits the task set do not fit with the
	// worker's defaults for the rest (an idle timeout as long as the
	// worker's total limit, say); nothing was sent.
	FailInvalidLimits FailureCode = "invalid_limits"
	// FailNeedsHumanTimeout: an operation waited for a person longer than
	// the task's human timeout.
	FailNeedsHumanTimeout FailureCode = "needs_human_timeout"
	// FailOperationAborted: a person resolved an operation with abort.
	FailOperationAborted FailureCode = "operation_aborted"
	// FailLedgerUnavailable: the task could not read or write its ledger
	// for longer than the worker's CAPSTAN_LEDGER_OUTAGE_LIMIT in one
	// outage. Nothing was sent while it waited.
	FailLedgerUnavailable FailureCode = "ledger_unavailable"
	// FailPolicyViolation: the task's policy refused as many of its tool
	// calls as its refusal limit (CAPSTAN_POLICY_REFUSALS, --max-refusals;
	// default 3). Nothing refused was sent.
	FailPolicyViolation FailureCode = "policy_violation"
	// FailBudgetExhausted: what the task's model requests spent reached
	// its token or cost budget (docs/design.md §11.4); no further request
	// was sent.
	FailBudgetExhausted FailureCode = "budget_exhausted"
	// FailDependencyUnavailable: a write confirmed absent (nothing
	// happened) kept failing to happen when executed again, for longer
	// than the task's DependencyOutageLimit (CAPSTAN_DEPENDENCY_OUTAGE_LIMIT,
	// default 30 min): its dependency is down, and no person was asked
	// about an effect capstan knew had not happened.
	FailDependencyUnavailable FailureCode = "dependency_unavailable"
	// FailInternalError: the workflow stopped on an error it has no code
	// for; the message carries the error. A bug, never a routine ending.
	FailInternalError FailureCode = "internal_error"
	// FailTerminated and FailWorkflowTimeout are never set by the workflow
	// itself: starter reports them for a task that Temporal ended from
	// outside (`temporal workflow terminate`, a workflow run timeout).
	FailTerminated      FailureCode = "terminated"
	FailWorkflowTimeout FailureCode = "workflow_timeout"
)

// taskError ends a task as failed with a code and a sentence.
type taskError struct {
	code FailureCode
	msg  string
}

func (e *taskError) Error() string { return string(e.code) + ": " + e.msg }
