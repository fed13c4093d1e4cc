// Package ledger is capstan's durable record of intended side effects
// (docs/design.md §5.3) and of transcript items. Every worker of a pool shares one
// ledger, so a retry on another worker sees what the first attempt did.
//
// Guarantees:
//   - Claim is a compare-and-set: at most one live claim per operation id.
//   - Every write after a claim presents the claim's fence; a write with a
//     stale fence fails with ErrFenced and changes nothing, so an attempt that
//     lost its claim can never overwrite what its successor recorded.
//   - A reconciler takes an operation whose outcome is unknown under a new
//     fence (TakeForReconcile) before it writes its verdict, so neither the
//     verdict nor a needs_human can be overwritten by an attempt that was
//     still in flight when the reconciler looked.
//   - Transcript items are content-addressed: PutItem of equal bytes returns
//     the same reference and stores one row.
//   - A turn commits once: the first CommitTurn of a turn id wins, so a
//     settled turn is never sampled again (docs/design.md §4.3).
//   - Every lease is judged, and every row stamped, by one clock, the
//     ledger's: the database's for PostgreSQL, the machine's for SQLite
//     (one file on one machine). Never the clock of the worker that asks,
//     which may be minutes off another worker's (docs/design.md §5.3).
//   - Retention (RemoveChain) deletes an item only when no other chain,
//     and no task without a scope, refers to it (scope.go).
package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan"
)

// Operation is one row of the operations table.
type Operation struct {
	ID             string
	Tenant         string
	TaskID         string
	TurnID         string
	ToolCallID     string
	Kind           string // tool name or delivery kind, e.g. "github_create_pull_request", "slack_post"
	BusinessKey    string
	RequestHash    string
	State          capstan.Outcome
	LeaseOwner     string
	LeaseExpiresAt time.Time
	Fence          int64
	AttemptCount   int
	ExternalID     string
	Result         []byte
	Error          string
	// Facts are what the attempt that sent the request recorded about the
	// world just before sending it (a JSON document, e.g. the head SHA of a
	// pull request's branch), for a reconciler to read if its answer is
	// lost. MarkRunning writes them; a new claim clears them; Complete and
	// TakeForReconcile keep them. Nil when the attempt recorded none.
	Facts     []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ClaimStatus is what Claim decided.
type ClaimStatus string

const (
	// Claimed: the caller holds the claim and the returned fence.
	Claimed ClaimStatus = "claimed"
	// AlreadySucceeded: the operation already happened; the returned
	// operation carries the stored result. Do not act again.
	AlreadySucceeded ClaimStatus = "already_succeeded"
	// InProgress: another owner holds a live lease.
	InProgress ClaimStatus = "in_progress"
	// MustReconcile: the outcome of an earlier attempt is not known (unknown,
	// needs_human, or an expired lease on a running operation); ask the
	// external system before acting.
	MustReconcile ClaimStatus = "must_reconcile"
	// DecidedOtherwise: the request carried a policy decision
	// (ClaimRequest.Decision) and the operation already had another one
	// recorded, which stands (ClaimResult.Decision). Nothing was claimed:
	// the caller acts on the recorded decision as on RecordDecision's
	// answer, and claims without a decision if it lets the call through.
	DecidedOtherwise ClaimStatus = "decided_otherwise"
)

// ClaimRequest asks for the right to perform an operation.
type ClaimRequest struct {
	Op    Operation // identity fields: ID, Tenant, TaskID, TurnID, ToolCallID, Kind, BusinessKey, RequestHash
	Owner string    // worker identity + activity attempt
	Lease time.Duration
	// Running claims the operation straight into running, counting the
	// attempt, as a claim followed by MarkRunning(nil facts) would, in one
	// write. It is for an attempt that has nothing left to check or record
	// before it sends: from the moment the claim is durable the request may
	// be on the wire, so a lease that runs out must be reconciled, never
	// taken over. It changes nothing when the claim is not granted.
	Running bool
	// Facts, with Running, are what the attempt read before sending, for
	// its reconciler (Operation.Facts): recorded by the claim's own write
	// as MarkRunning(facts) would record them, so a tool that prepares
	// (tools.Preparer) still pays one durable write before it sends, not
	// two. Without Running they must be nil: a claim that is not yet
	// running has nothing recorded.
	Facts []byte
	// Decision, when not nil, is the task's policy's decision on the
	// operation, recorded in the claim's own write as RecordDecision
	// records it — once per operation id, the first record winning — so a
	// call the policy lets through costs one durable write, not two. Its
	// OperationID, Tenant, TaskID and Tool, when empty, are Op's
	// (ClaimDecision). The claim is decided only when the decision that
	// stands afterwards is this one (SameDecision): recorded by this
	// request, or earlier with the same effect, rule, reason and refusal;
	// otherwise nothing is claimed and the status is DecidedOtherwise. The
	// decision stays recorded whatever the claim's answer — ErrConflict
	// included — as it would have been by a RecordDecision before it.
	Decision *Decision
}

// ClaimResult is the operation as it stands after the claim.
type ClaimResult struct {
	Status ClaimStatus
	Op     Operation
	// Decision is the decision that stands on the operation after a
	// request that carried one (nil for a request without), and
	// DecisionCreated says this request recorded it. Both are set, and the
	// decision recorded, also when Claim answers ErrConflict.
	Decision        *Decision
	DecisionCreated bool
}

// Decision is the decision of a task's policy on one operation
// (docs/design.md §5.8), recorded before anything is sent — by
// RecordDecision before any claim, or in the claim's own transaction
// (ClaimRequest.Decision) — once per operation id: a refused operation has
// its decision and no operations row. Retention deletes it with its chain's operations (its
// id carries the chain's scope).
type Decision struct {
	OperationID string
	Tenant      string
	TaskID      string
	Tool        string
	Effect      string // allow, deny or require_approval
	Rule        string
	Reason      string
	// Layer is the rule set the rule is of (policy.Decision.Layer):
	// "default", "worker FILE@SHA" (the deciding worker's own file),
	// "task FILE" or "task"; "" for a decision recorded before layers.
	Layer string
	// Refused says nothing was, or will be, sent for the operation.
	Refused   bool
	CreatedAt time.Time
}

// Completion records how a claimed operation ended.
type Completion struct {
	ID         string
	Fence      int64
	State      capstan.Outcome // succeeded, failed, unknown, absent or needs_human
	ExternalID string
	Result     []byte
	Error      string
	// Items are transcript items (as PutItem stores them) written in the
	// same transaction as the completion: the message that tells the model
	// what the call did is durable exactly when the outcome is. Nothing is
	// stored when the completion is refused.
	Items [][]byte
}

// Store is the ledger. Implementations: sqlite (embedded default) and
// postgres (a pool across machines); both apply the rules in rules.go and
// pass the contract suite in ledgertest.
type Store interface {
	// Claim creates the operation if new, or takes it when it is absent,
	// failed, or claimed with an expired lease. It returns ErrConflict when
	// the id is known with another request hash. A request that carries
	// the policy's decision (ClaimRequest.Decision) records it in the
	// same transaction, so both are durable together.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// MarkRunning moves a claimed operation to running just before the
	// request is sent, counts the attempt, and records facts, what the
	// attempt learned before sending (see Operation.Facts; nil for none).
	MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error
	// Renew extends the live lease of a claimed or running operation to
	// now+lease under its fence; activities call it with every heartbeat,
	// so a lease outlives a slow call but not a dead worker. A stale fence
	// or an expired lease is ErrFenced.
	Renew(ctx context.Context, id string, fence int64, lease time.Duration) error
	// Complete records the end of an attempt.
	Complete(ctx context.Context, c Completion) error
	// Release returns a claim without acting (nothing was sent), leaving the
	// operation free to claim again.
	Release(ctx context.Context, id string, fence int64) error
	// TakeForReconcile takes an operation whose outcome is unknown —
	// unknown, needs_human, or claimed or running with an expired lease —
	// for owner: a new fence (the old one plus one) and a lease of the given
	// length; the state stays. The reconciler then writes its verdict with
	// Complete under the new fence, so an attempt still holding an older
	// fence can never overwrite it. A live lease, whoever holds it, is
	// refused with a *LeaseHeldError (errors.Is ErrLeaseHeld). An operation
	// whose outcome the ledger already knows (succeeded, failed, absent,
	// declared) is returned as it stands, with ErrSettled.
	TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (Operation, error)
	Get(ctx context.Context, id string) (Operation, error)
	ListByTask(ctx context.Context, taskID string) ([]Operation, error)

	// PutItem stores a transcript item and returns its reference
	// ("sha256:<hex>").
	PutItem(ctx context.Context, data []byte) (string, error)
	// GetItem returns the bytes stored under ref, or ErrNotFound.
	GetItem(ctx context.Context, ref string) ([]byte, error)
	// GetItems returns the bytes stored under each of refs, in refs'
	// order (a reference may repeat), in one round trip per few hundred
	// references rather than one per item; ErrNotFound, naming the first
	// missing reference, when any is missing.
	GetItems(ctx context.Context, refs []string) ([][]byte, error)

	// CommitTurn records the committed output of a model turn under its
	// turn id, once: the first commit wins, and every later one (a
	// redelivered activity, a zombie attempt, a reset) gets the output
	// that was committed first. It returns the stored output. items are
	// transcript items (as PutItem stores them) written in the same
	// transaction, whichever commit wins, so the items a committed output
	// refers to are stored when, and only when, it is.
	CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error)
	// GetTurn returns a turn's committed output, or ErrNotFound.
	GetTurn(ctx context.Context, turnID string) ([]byte, error)

	// RecordDecision records the policy's decision on an operation,
	// once: the first record of an operation id wins, and every later one
	// — a repeated ExecuteTool of the operation — gets it back instead of
	// its own (stored), with created false. CreatedAt is the ledger's.
	RecordDecision(ctx context.Context, d Decision) (stored Decision, created bool, err error)
	// Decisions lists a task's recorded decisions, oldest first; none is
	// an empty slice.
	Decisions(ctx context.Context, taskID string) ([]Decision, error)

	// Retention deletes the rows of chains Temporal no longer has
	// (starter gc).
	Retention

	Close() error
}

var (
	// ErrNotFound: no such operation or item.
	ErrNotFound = errors.New("ledger: not found")
	// ErrConflict: the operation id is known with another request hash.
	ErrConflict = errors.New("ledger: operation id reused with a different request")
	// ErrFenced: the write presented a stale fence; a newer claim owns the
	// operation.
	ErrFenced = errors.New("ledger: stale fence")
	// ErrLeaseHeld: another attempt holds a live lease on the operation;
	// a *LeaseHeldError says who and until when.
	ErrLeaseHeld = errors.New("ledger: lease held")
	// ErrSettled: the ledger already knows how the operation ended; there
	// is nothing to reconcile.
	ErrSettled = errors.New("ledger: outcome already recorded")
	// ErrUnavailable: the ledger could not be reached or could not answer
	// — its server is down or restarting, the connection was lost, the
	// call ran out of time, SQLite's file stayed locked or failed to read
	// or write. The request may not have been written (or, for a write
	// whose answer was lost, may have been); asked again once the ledger
	// is back, it gets a definite answer. A store wraps such an error with
	// Unavailable, so errors.Is finds both ErrUnavailable and the cause.
	// Every other error is the ledger's own answer (ErrNotFound,
	// ErrConflict, ErrFenced, …) and stays as it is.
	ErrUnavailable = errors.New("ledger: unavailable")
)

// Unavailable marks err as ErrUnavailable, keeping it: errors.Is(result,
// ErrUnavailable) and errors.Is(result, target) for whatever err matched.
// A nil err, or one already marked, is returned as it is.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return "ledger unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// LeaseHeldError is TakeForReconcile's refusal of an operation under a live
// lease. It matches ErrLeaseHeld with errors.Is.
type LeaseHeldError struct {
	ID        string
	State     capstan.Outcome
	Owner     string
	ExpiresAt time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("operation %s is %s and %s holds its lease until %s",
		e.ID, e.State, e.Owner, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrLeaseHeld) true.
func (e *LeaseHeldError) Is(target error) bool { return target == ErrLeaseHeld }

// StateOf reads the state column of an operations row. Rows written before
// the one vocabulary hold the old upper-case states (SUCCEEDED,
// NEEDS_HUMAN, …); they read as the outcome they meant
// (capstan.ParseOutcome). A string no release wrote reads as itself, which
// the claim rules refuse as unrecognised rather than guess.
func StateOf(column string) capstan.Outcome {
	o, _ := capstan.ParseOutcome(column)
	return o
}

// Spellings are the strings a state column may hold for states — each
// one's spelling and those older releases wrote for it — as query
// arguments, for a query that must match rows written before the one
// vocabulary and after it.
func Spellings(states ...capstan.Outcome) []any {
	var out []any
	for _, s := range states {
		out = append(out, string(s))
		for _, old := range s.OldSpellings() {
			out = append(out, old)
		}
	}
	return out
}
