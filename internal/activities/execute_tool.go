package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/tool"
)

// verifyTimeout bounds the read-back of an ambiguous write. It runs even
// when the activity was cancelled or ran out of time: what it learns spares
// a reconciliation.
const verifyTimeout = 15 * time.Second

// ExecuteTool performs one operation at most once (docs/design.md §5.4):
//
//  0. when the task has a policy context (in.Policy), decide the call
//     against the task's policy (policy.go) and record the decision in the
//     ledger, once per operation — in the claim's own write when the
//     decision lets the call through; a refusal is a tool error the model
//     reads, nothing claimed and nothing sent, and the decision comes back
//     in the result either way;
//  1. claim the operation in the ledger; if it already SUCCEEDED, return the
//     stored result without calling anything (Replayed);
//  2. when the tool is a tool.Preparer, read the facts its reconciler will
//     need, record them with the RUNNING mark, and hand them to the call
//     (tool.Call.Facts); if they cannot be read, nothing is sent, a claim
//     taken is released, and Temporal retries. On an operation the ledger
//     has never seen they are read before the claim, and the claim records
//     them (begin);
//  3. mark it RUNNING — in the claim's own write unless facts were read
//     under the claim — and call the tool, heartbeating on a ticker
//     meanwhile;
//  4. record SUCCEEDED with the external id, FAILED for a definite refusal,
//     ABSENT when provably nothing was sent (a rate limit among others: the
//     retry waits as long as the service asked), and UNKNOWN when the
//     request may have acted — a timeout after the request left is never
//     FAILED. An ambiguous failure of an idempotent write whose tool can
//     read its effect back (tool.Verifier) is settled by that read:
//     SUCCEEDED when the effect is in place, ABSENT when it is not, UNKNOWN
//     only when the read fails too.
//
// Every ledger write after the call uses a context the activity's
// cancellation cannot break, and none of their errors is ignored.
//
// An UNKNOWN operation is returned as a contract.ErrTypeOperationUnknown error that
// Temporal does not retry: only a reconciler may decide what happened.
//
// The call goes through its service's breaker (toolBreaker): while it is
// open nothing is sent, the claim is released, and the activity fails with
// contract.ErrTypeBreakerOpen. Every retryable failure carries a jittered delay.
func (a *Activities) ExecuteTool(ctx context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
	ctx = scoped(logids.With(ctx, logids.IDs{TaskID: in.TaskID, TurnID: in.TurnID, OperationID: in.OperationID}), in.Scope, in.TaskID)
	ctx, span := a.startToolSpan(ctx, in)
	res, err := a.executeTool(ctx, in)
	err = a.retryable(ctx, err)
	a.endToolSpan(span, in, res, err)
	a.countRetry(ctx, "ExecuteTool", err)
	return res, err
}

func (a *Activities) executeTool(ctx context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
	res := contract.ExecuteToolResult{OperationID: in.OperationID}
	impl, err := a.Tools.Get(in.Tool)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeWorkerConfig, nil)
	}
	args, err := a.Ledger.GetItem(ctx, in.Arguments)
	if err != nil {
		return res, fmt.Errorf("load arguments of operation %s: %w", in.OperationID, err)
	}
	if in.LedgerOnly {
		return a.ledgerOnly(ctx, in, impl, args, res)
	}
	id, pending, res, stop, err := a.screen(ctx, in, impl, args, res)
	if stop {
		return res, err
	}

	call := tool.Call{OperationID: in.OperationID, Arguments: args}
	op := ledger.Operation{ID: in.OperationID, Tenant: in.Tenant, TaskID: in.TaskID, TurnID: in.TurnID,
		ToolCallID: in.ToolCallID, Kind: in.Tool, BusinessKey: id.BusinessKey, RequestHash: RequestHash(in.Tool, id.Effect)}
	rec, permit, done, err := a.begin(ctx, op, pending, toolBreaker(impl), preparing(impl, call))
	if other := (*decidedOtherwise)(nil); errors.As(err, &other) {
		// An earlier attempt's decision stands: act on it, as on the
		// decision RecordDecision returns, and claim without one.
		if res, stop, err = a.abide(ctx, in, impl, args, id, res, policyDecision(other.stored)); stop {
			return res, err
		}
		rec, permit, done, err = a.begin(ctx, op, nil, toolBreaker(impl), preparing(impl, call))
	}
	if errors.Is(err, ledger.ErrConflict) && id.BusinessKey != "" {
		return a.keyTaken(ctx, in, res, id.BusinessKey, err)
	}
	if err != nil {
		return res, err
	}
	if done {
		res.Replayed = true
		if res, err = a.succeeded(ctx, in, res, rec.ExternalID, rec.Result); err == nil {
			res.Preview = resultPreview(impl, args, rec.Result, res.Preview)
		}
		return res, err
	}
	o := a.perform(ctx, impl, call, rec, permit)

	completion, msg := toolCompletion(in, rec.Fence, o)
	// Recorded even if the activity is being cancelled, and through a
	// ledger outage while the activity has time: it happened.
	if err := a.record(ctx, completion); err != nil {
		// The effect may have happened but we could not record it: the next
		// attempt finds the operation RUNNING and must reconcile (and when
		// the ledger stayed down, err says it is unknown: a reconciler
		// decides).
		return res, recordFailed(err, "record operation %s as %s", in.OperationID, o.state)
	}
	switch o.state {
	case capstan.OutcomeSucceeded:
		res.State, res.ExternalID, res.Item = capstan.OutcomeSucceeded, o.result.ExternalID, msg.ref()
		res.Preview = resultPreview(impl, args, o.result.Output, msg.preview)
		return res, nil
	case capstan.OutcomeFailed:
		res.State, res.Item, res.Preview = capstan.OutcomeFailed, msg.ref(), msg.preview
		return res, nil
	case capstan.OutcomeAbsent:
		if o.verdict == tool.VerdictNotSent {
			return res, a.notSent(ctx, contract.ErrTypeOperationNotSent, fmt.Sprintf("%s was not sent: %v", in.Tool, o.err), o.err)
		}
		return res, fmt.Errorf("%s: %w", in.Tool, o.err) // safe to repeat: let Temporal retry
	default:
		return res, unknownOperation(in.OperationID, capstan.OutcomeUnknown, o.err)
	}
}

// toolCompletion is the ledger write that records how the call ended, and
// the message that tells the model what it did, which is stored in the
// same write as the outcome (none for an ABSENT or UNKNOWN call).
func toolCompletion(in contract.ExecuteToolInput, fence int64, o toolOutcome) (ledger.Completion, toolMessage) {
	completion := ledger.Completion{ID: in.OperationID, Fence: fence, State: o.state,
		ExternalID: o.result.ExternalID, Result: o.result.Output, Error: errorText(o.err)}
	var msg toolMessage
	switch o.state {
	case capstan.OutcomeSucceeded:
		msg = succeededMessage(in, o.result.Output, false, o.recovered)
	case capstan.OutcomeFailed:
		msg = refusedMessage(in, o.err)
	}
	if msg.data != nil {
		completion.Items = [][]byte{msg.data}
	}
	return completion, msg
}

// screen validates the call's arguments and names their effect, and has
// the task's policy decide the call (admit), before anything is claimed or
// sent: a person's denial (in.Denial) and a call that waits for a
// person's approval (approval.go) go no further either. stop says the call
// goes no further: res (or err) is the answer. pending, when not nil, is
// the policy's decision for the claim to record (admit).
func (a *Activities) screen(ctx context.Context, in contract.ExecuteToolInput, impl tool.Tool, args json.RawMessage, res contract.ExecuteToolResult) (id tool.Identity, pending *ledger.Decision, _ contract.ExecuteToolResult, stop bool, err error) {
	if err := a.schemaKept(ctx, in, impl); errors.Is(err, tool.ErrRefused) {
		res, err = a.refused(ctx, in, res, err)
		return id, nil, res, true, err
	} else if err != nil {
		return id, nil, res, true, err
	}
	if id, err = impl.Identify(args); err != nil {
		// The model turn validated these arguments; reaching here means the
		// tool changed under a running task. Tell the model, act on nothing.
		res, err = a.refused(ctx, in, res, err)
		return id, nil, res, true, err
	}
	if in.Denial != nil {
		res, stop, held, err := a.sentBefore(ctx, in, impl, args, res)
		if held != "" && err == nil {
			return id, nil, res, false, nil // settled by its claim, never denied
		}
		if !stop {
			res, err = a.denied(ctx, in, res)
		}
		return id, nil, res, true, err
	}
	if err := approvedOtherCall(in, args); err != nil {
		res, err = a.refused(ctx, in, res, err)
		return id, nil, res, true, err
	}
	pending, res, stop, err = a.admit(ctx, in, impl, args, id, res)
	return id, pending, res, stop || err != nil, err
}

// toolOutcome is what one attempt learned about its call.
type toolOutcome struct {
	state     capstan.Outcome // SUCCEEDED, FAILED, ABSENT or UNKNOWN
	result    tool.Result     // of a SUCCEEDED call
	err       error           // why it did not succeed
	verdict   tool.Verdict    // of err
	recovered bool            // the call's answer was lost; a read-back found its effect in place
}

// preparing is begin's prepare for a tool that is a tool.Preparer, nil for
// any other.
func preparing(impl tool.Tool, call tool.Call) func(context.Context) ([]byte, error) {
	p, ok := impl.(tool.Preparer)
	if !ok {
		return nil
	}
	return func(ctx context.Context) ([]byte, error) { return p.Prepare(ctx, call) }
}

// perform calls the tool under heartbeats and decides what the call did,
// and tells the breaker's permit what the call showed of the service. rec
// is the operation as begin left it: RUNNING, this attempt counted, with
// the facts recorded before sending, which the call is given (what was
// recorded is what is sent).
func (a *Activities) perform(ctx context.Context, impl tool.Tool, call tool.Call, rec ledger.Operation, permit *breaker.Permit) toolOutcome {
	call.Facts = rec.Facts
	var step atomic.Value
	step.Store(stepCalling)
	stop := a.heartbeat(ctx, a.heartbeatInterval(ctx),
		func() any { return OperationHeartbeat{OperationID: call.OperationID, Step: step.Load().(string)} },
		a.renewLease(ctx, call.OperationID, rec.Fence))
	defer stop()

	out, err := impl.Execute(ctx, call)
	permit.Done(toolHealth(err))
	if err == nil {
		out.Output = a.capMCPResult(ctx, impl, out.Output)
		return toolOutcome{state: capstan.OutcomeSucceeded, result: out}
	}
	o := toolOutcome{err: err, verdict: tool.Classify(err)}
	verifier, canVerify := impl.(tool.Verifier)
	canVerify = canVerify && impl.Class() == tool.Idempotent
	switch {
	case o.verdict == tool.VerdictNotSent:
		o.state = capstan.OutcomeAbsent
	case o.verdict == tool.VerdictFailed:
		o.state = capstan.OutcomeFailed
		if canVerify && errors.Is(err, tool.ErrChangedSinceRead) && rec.AttemptCount > 1 {
			// The target changed under a retried write: perhaps by the
			// earlier attempt's own write, whose answer was lost.
			step.Store(stepVerifying)
			return verify(ctx, verifier, call, o, capstan.OutcomeFailed)
		}
	case canVerify: // unknown or cancelled: the write may have landed
		step.Store(stepVerifying)
		return verify(ctx, verifier, call, o, capstan.OutcomeAbsent)
	case impl.Class() == tool.ReadOnly || impl.Class() == tool.Idempotent:
		// Nothing to reconcile for a read, nor for a write that is safe to
		// repeat with the same operation id: mark it ABSENT so the retry
		// may claim it, and let Temporal retry.
		o.state = capstan.OutcomeAbsent
	default:
		o.state = capstan.OutcomeUnknown // only a reconciler may decide
	}
	return o
}

// verify asks the tool whether the call whose outcome o is in doubt landed:
// in place → SUCCEEDED, recovered; not in place → notInPlace (ABSENT after an
// ambiguous failure, so the retry may write; FAILED after a refusal, which
// then stands); the read failed too → UNKNOWN. The read runs in a context
// the activity's cancellation cannot break.
func verify(ctx context.Context, v tool.Verifier, call tool.Call, o toolOutcome, notInPlace capstan.Outcome) toolOutcome {
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verifyTimeout)
	defer cancel()
	res, landed, err := v.Verify(vctx, call)
	switch {
	case err != nil:
		o.state = capstan.OutcomeUnknown
		o.err = fmt.Errorf("%w; reading it back could not tell whether it took effect: %v", o.err, err)
	case landed:
		return toolOutcome{state: capstan.OutcomeSucceeded, result: res, recovered: true}
	default:
		o.state = notInPlace
		o.err = fmt.Errorf("%w; reading it back showed it did not take effect", o.err)
	}
	return o
}

// toolMessage is the encoded tool message that tells the model how a call
// ended, with the preview the workflow shows of it.
type toolMessage struct {
	data    []byte
	preview string
}

// ref is the message's transcript reference.
func (m toolMessage) ref() string { return ledger.ItemRef(m.data) }

func newToolMessage(in contract.ExecuteToolInput, content string) toolMessage {
	// A message of strings alone always encodes.
	data, _ := json.Marshal(model.Message{Role: model.RoleTool, ToolCallID: in.ToolCallID, Content: content})
	return toolMessage{data: data, preview: preview(content)}
}

// succeededMessage is the tool message of a successful, replayed or
// recovered call.
func succeededMessage(in contract.ExecuteToolInput, output []byte, replayed, recovered bool) toolMessage {
	content := string(output)
	switch {
	case replayed:
		content = `{"replayed":true,"note":"this operation had already succeeded; nothing was sent again","result":` + orNull(output) + `}`
	case recovered:
		content = `{"recovered":true,"note":"the answer to this call was lost; reading back showed its effect in place, so nothing was sent again","result":` + orNull(output) + `}`
	}
	return newToolMessage(in, content)
}

// refusedMessage is the tool message telling the model its call was
// refused; the task goes on.
func refusedMessage(in contract.ExecuteToolInput, cause error) toolMessage {
	body, _ := json.Marshal(map[string]string{"error": cause.Error()})
	return newToolMessage(in, string(body))
}

// succeeded commits the tool message of a call that had already succeeded
// (Replayed): the ledger holds no write of this attempt to store it with.
func (a *Activities) succeeded(ctx context.Context, in contract.ExecuteToolInput, res contract.ExecuteToolResult, externalID string, output []byte) (contract.ExecuteToolResult, error) {
	msg := succeededMessage(in, output, res.Replayed, false)
	item, err := a.Ledger.PutItem(ctx, msg.data)
	if err != nil {
		return res, fmt.Errorf("store transcript item: %w", err)
	}
	res.State, res.ExternalID, res.Item, res.Preview = capstan.OutcomeSucceeded, externalID, item, msg.preview
	return res, nil
}

// refused commits the tool message of a call refused before anything was
// claimed.
func (a *Activities) refused(ctx context.Context, in contract.ExecuteToolInput, res contract.ExecuteToolResult, cause error) (contract.ExecuteToolResult, error) {
	msg := refusedMessage(in, cause)
	item, err := a.Ledger.PutItem(ctx, msg.data)
	if err != nil {
		return res, fmt.Errorf("store transcript item: %w", err)
	}
	res.State, res.Item, res.Preview = capstan.OutcomeFailed, item, msg.preview
	return res, nil
}

// keyTaken answers a call whose business key an earlier call of this task
// took with other arguments — the model creating a branch it already
// created, now from another commit: the ledger holds one operation per key
// and refuses a second request under it (ledger.ErrConflict). The request is
// reasonable and the effect's existence answers it, so the model is told,
// as a refusal it reads, what the earlier call did, and the task goes on.
// Nothing is sent and the earlier operation is left as it stands.
//
// An operation id the ledger holds for another business key is no such
// request but a workflow naming two effects alike: that stays the conflict
// (conflict, the contract.ErrTypeOperationConflict error), which fails the task.
func (a *Activities) keyTaken(ctx context.Context, in contract.ExecuteToolInput, res contract.ExecuteToolResult, key string, conflict error) (contract.ExecuteToolResult, error) {
	op, err := a.Ledger.Get(ctx, in.OperationID)
	if err != nil {
		return res, fmt.Errorf("read operation %s, whose key %s another request holds: %w", in.OperationID, key, err)
	}
	if op.BusinessKey != key {
		return res, conflict
	}
	earlier := fmt.Sprintf("an earlier call of this task with other arguments already did %s (operation %s)", key, op.ID)
	var why string
	switch op.State {
	case capstan.OutcomeSucceeded:
		why = fmt.Sprintf("%s, and what it made exists: %s. One business key names one effect: work with what exists, or use another name",
			earlier, op.ExternalID)
	case capstan.OutcomeFailed:
		why = fmt.Sprintf("%s, and it was refused (%s). This task cannot send a different request under the same key: use another name",
			earlier, op.Error)
	default:
		why = fmt.Sprintf("%s; its outcome is %s. This task cannot send a different request under the same key", earlier, op.State)
	}
	return a.refused(ctx, in, res, fmt.Errorf("%s refused, nothing was sent: %s", in.Tool, why))
}

// resultPreview is contract.ExecuteToolResult.Preview of a successful call: it goes
// into the workflow's history, which the Temporal server stores
// unencrypted, so it never holds content read from a repository. A read
// says how much it read of what (its summary, made of the arguments,
// already in history); a write keeps the preview of its own output, which
// names what capstan wrote (a branch, a commit, a URL).
func resultPreview(impl tool.Tool, args json.RawMessage, output []byte, written string) string {
	if impl.Class() != tool.ReadOnly {
		return written
	}
	return preview(fmt.Sprintf("read %s bytes: %s", thousands(len(output)), impl.Summary(args)))
}

// thousands writes n with commas between its groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func orNull(b []byte) string {
	if len(b) == 0 || !json.Valid(b) {
		return "null"
	}
	return string(b)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
