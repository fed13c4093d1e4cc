package activities

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// Error types of the application errors the activities return. The workflow
// switches on them; they are the only contract between the two about
// failure. Each constant's name is its value, prefixed ErrType, because the
// value is what the Temporal UI shows and recorded histories hold.
const (
	// ErrTypeModelAttempt: a model attempt ended without a complete output.
	// The details carry an AttemptReport (read it with AttemptReportOf);
	// the workflow's turn guard decides whether to try again. Never retried
	// by Temporal itself.
	ErrTypeModelAttempt = "ModelAttempt"
	// ErrTypeOperationConflict: the operation id is known with another
	// request hash.
	ErrTypeOperationConflict = "OperationConflict"
	// ErrTypeOperationInProgress: another worker holds a live claim; retry
	// after the lease.
	ErrTypeOperationInProgress = "OperationInProgress"
	// ErrTypeOperationUnknown: the request may have reached the external
	// system and its outcome is not known. The operation is UNKNOWN in the
	// ledger and must be reconciled, never blindly retried.
	ErrTypeOperationUnknown = "OperationUnknown"
	// ErrTypeOperationNotSent: the external system took nothing (rate
	// limited, or the request never left); the operation is ABSENT and
	// Temporal retries it, after the error's next-retry delay when the
	// system named one.
	ErrTypeOperationNotSent = "OperationNotSent"
	// ErrTypeDeliveryFailed: the delivery target refused the message.
	ErrTypeDeliveryFailed = "DeliveryFailed"
	// ErrTypeDeliveryNotSent: the delivery target took nothing (rate
	// limited, or the request never left); Temporal retries it, after the
	// error's next-retry delay when the target named one.
	ErrTypeDeliveryNotSent = "DeliveryNotSent"
	// ErrTypeWorkerConfig: the worker lacks what the call needs (a
	// provider, a token); retrying on the same worker cannot help.
	ErrTypeWorkerConfig = "WorkerConfig"
	// ErrTypeBreakerOpen: the dependency's circuit breaker was open, so
	// nothing was sent (a tool operation's claim was released). Retryable;
	// its next-retry delay is the time left in the open period plus
	// jitter, and its details a BreakerWait naming the breaker. The
	// workflow waits that long itself rather than spend the activity's
	// retry attempts (workflows/options.go).
	ErrTypeBreakerOpen = "BreakerOpen"
	// ErrTypeInvalidResolution: a person's resolution that Reconcile
	// cannot record (found without a URL, or a verdict other than found
	// or absent). Never retried.
	ErrTypeInvalidResolution = "InvalidResolution"
)

// ModelTurnInput asks for one attempt of one turn. The transcript travels by
// reference: Transcript names the manifest of committed items, Append the
// items committed since (tool results), and Seed the opening messages of a
// task's first turn. History therefore grows by a constant per turn.
type ModelTurnInput struct {
	TaskID    string
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
}

// ModelTurnResult is the committed output of a completed attempt.
type ModelTurnResult struct {
	AttemptID    string
	Transcript   string // manifest ref including the assistant item
	Text         string
	ToolCalls    []ToolCallRef
	FinishReason string
	Usage        model.Usage
	Phase        model.Phase
	Events       int
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
	Class       string // tools.Class
	BusinessKey string // empty when the tool has none
	Arguments   string // ref of the arguments in the ledger
	Summary     string // what the Temporal UI shows for the call
}

// AttemptReport describes an attempt that did not complete; it is the detail
// of an ErrTypeModelAttempt application error and of a heartbeat.
type AttemptReport struct {
	AttemptID    string        `json:"attempt_id"`
	Outcome      model.Outcome `json:"outcome"`
	Phase        model.Phase   `json:"phase"`
	HTTPStatus   int           `json:"http_status,omitempty"`
	RetryAfterMS int64         `json:"retry_after_ms,omitempty"`
	// Breaker names the provider's breaker of a breaker_open attempt.
	Breaker     string `json:"breaker,omitempty"`
	Message     string `json:"message,omitempty"`
	Events      int    `json:"events"`
	Chars       int    `json:"chars"`
	PreviewTail string `json:"preview_tail,omitempty"`
	// StreamURL is where followers read this attempt's text live (the
	// worker's livestream hub); empty when the worker serves none.
	StreamURL string `json:"stream_url,omitempty"`
}

// ExecuteToolInput asks for one operation. OperationID was fixed by the
// workflow; every retry of the same intent carries the same one.
type ExecuteToolInput struct {
	Tenant      string
	TaskID      string
	TurnID      string
	OperationID string
	ToolCallID  string
	Tool        string
	Arguments   string // ref of the arguments in the ledger
}

// ExecuteToolResult is how the operation ended. A tool that refused the
// request (a definite 4xx, invalid arguments) is not an activity failure: the
// model is told, State is FAILED, and Item carries the message.
type ExecuteToolResult struct {
	OperationID string
	State       ledger.State // SUCCEEDED or FAILED
	ExternalID  string
	Replayed    bool   // the ledger already held SUCCEEDED; nothing was sent
	Item        string // ref of the tool message committed to the transcript
	Preview     string // first characters of the output, for the UI
}

// DeliverInput asks to post the final answer to one target.
type DeliverInput struct {
	Tenant      string
	TaskID      string
	OperationID string
	Channel     string // Slack channel name or id; empty for a comment
	// Comment, when set, delivers the text as a comment on a GitHub issue
	// or pull request instead of a Slack message.
	Comment *CommentTarget `json:",omitempty"`
	Text    string
}

// CommentTarget is a GitHub issue or pull request that receives a task's
// final answer as a comment.
type CommentTarget struct {
	Repo   string // owner/name
	Number int
}

// CommentArguments are the github_comment arguments of a comment delivery
// (ghref.CommentArguments): the workflow names them by their ledger
// reference, Deliver stores them.
func CommentArguments(target CommentTarget, text string) []byte {
	return ghref.CommentArguments(target.Repo, target.Number, text)
}

// DeliverResult is an acknowledged delivery.
type DeliverResult struct {
	OperationID string
	ExternalID  string // "<channel>/<ts>"
	Replayed    bool
}

// AttemptReportOf returns the report carried by a failed ModelTurn: err is
// what the workflow got from the activity (it may wrap the application
// error). ok is false for any other error, including an ErrTypeModelAttempt
// error whose details cannot be decoded.
func AttemptReportOf(err error) (r AttemptReport, ok bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrTypeModelAttempt || !appErr.HasDetails() {
		return r, false
	}
	if appErr.Details(&r) != nil {
		return AttemptReport{}, false
	}
	return r, true
}

// Verdict is what a reconciler concluded about an operation whose outcome
// was unknown (docs/design.md §5.4, §5.5).
type Verdict string

// Verdicts. Reconcile returns only the three final ones: it asks again
// itself, with jittered backoff, while the answer is "not yet".
const (
	// VerdictFound: the effect exists; the operation is SUCCEEDED.
	VerdictFound Verdict = "found"
	// VerdictAbsent: the effect certainly does not exist (not seen through
	// the whole consistency window, with every question answered); the
	// operation is ABSENT and may be executed again with the same id.
	VerdictAbsent Verdict = "absent"
	// VerdictNotYet: not seen, but the external system may still be
	// catching up; ask again within the consistency window.
	VerdictNotYet Verdict = "not_yet"
	// VerdictIndeterminate: nobody can tell (several candidates, or the
	// reconciler could not ask through the whole window); the operation
	// is NEEDS_HUMAN and a person decides.
	VerdictIndeterminate Verdict = "indeterminate"
)

// ReconcileInput asks what became of an UNKNOWN operation.
type ReconcileInput struct {
	Tenant      string
	TaskID      string
	OperationID string
	// ToolCallID is set for a tool operation: a found operation commits a
	// tool message for it, telling the model the operation was recovered.
	ToolCallID string
	// Since is when the workflow began reconciling this operation; the
	// consistency window runs from it, so a retried activity does not
	// restart the window.
	Since time.Time
	// Window is the consistency window; zero means DefaultReconcileWindow.
	Window time.Duration
	// Resolution, when set, is a person's verdict on an operation that is
	// NEEDS_HUMAN: Reconcile records it instead of asking the external
	// system.
	Resolution *Resolution
	// Arguments is the ref of the tool's arguments in the ledger (the
	// ToolCallRef's Arguments) for a tool operation: the reconciler reads
	// what to look for from them. Empty for a delivery.
	Arguments string
	// Channel is the Slack channel a delivery was posted to, as Deliver was
	// given it. Empty for a tool operation.
	Channel string
}

// Resolution is what a person decided about an operation nobody else could
// tell (the workflow's resolve update).
type Resolution struct {
	Verdict    Verdict // found or absent
	ExternalID string  // found: the URL the person saw
}

// ReconcileResult is a final verdict, recorded in the ledger under a new
// fence before it is returned.
type ReconcileResult struct {
	OperationID string
	Verdict     Verdict      // found, absent or indeterminate
	State       ledger.State // SUCCEEDED, ABSENT or NEEDS_HUMAN
	ExternalID  string       // what was found (a PR URL, a message ts)
	Reason      string       // one sentence: what was asked and seen
	Item        string       // found tool operation: ref of the tool message
	Asked       int          // how many times the external system was asked
}

// DefaultReconcileWindow bounds how long "not yet" may last before an
// unseen effect counts as absent.
const DefaultReconcileWindow = config.DefaultReconcileWindow
