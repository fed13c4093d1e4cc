package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan"
)

// The rules in this file decide every claim and every write after a claim.
// They look at one operation as read inside the store's transaction and never
// at the database, so each Store implementation only reads, locks and writes
// rows: the semantics are written once, and the contract suite in ledgertest
// holds every implementation to them. Their now is the ledger's clock as the
// store read it in that transaction (PostgreSQL: the database's), never a
// worker's.

// ValidateClaim refuses a claim without an operation id, an owner or a
// positive lease.
func ValidateClaim(req ClaimRequest) error {
	switch {
	case req.Op.ID == "":
		return errors.New("empty operation id")
	case req.Owner == "":
		return errors.New("empty owner")
	case req.Lease <= 0:
		return fmt.Errorf("lease %v, want > 0", req.Lease)
	case req.Facts != nil && !req.Running:
		return errors.New("facts without running: a claim records facts only when it marks the operation running")
	case req.Decision != nil && req.Decision.OperationID != "" && req.Decision.OperationID != req.Op.ID:
		return fmt.Errorf("the decision is on operation %q, not this one", req.Decision.OperationID)
	}
	return nil
}

// ClaimDecision is the decision req carries (ClaimRequest.Decision) with
// the identity fields it leaves empty taken from req.Op, and whether it
// carries one.
func ClaimDecision(req ClaimRequest) (Decision, bool) {
	if req.Decision == nil {
		return Decision{}, false
	}
	d := *req.Decision
	d.OperationID = req.Op.ID
	if d.Tenant == "" {
		d.Tenant = req.Op.Tenant
	}
	if d.TaskID == "" {
		d.TaskID = req.Op.TaskID
	}
	if d.Tool == "" {
		d.Tool = req.Op.Kind
	}
	return d, true
}

// SameDecision reports whether two decisions on an operation decide the
// same: effect, rule, reason, layer and refusal. A claim that carries a decision
// goes ahead only when the one recorded is the same as its own.
func SameDecision(a, b Decision) bool {
	return a.Effect == b.Effect && a.Rule == b.Rule && a.Reason == b.Reason && a.Layer == b.Layer && a.Refused == b.Refused
}

// LeaseLive reports whether op's lease is still held at now. A lease expires
// at LeaseExpiresAt exactly.
func LeaseLive(op Operation, now time.Time) bool {
	return !op.LeaseExpiresAt.IsZero() && now.Before(op.LeaseExpiresAt)
}

// NewClaim is the operation a claim inserts for an id the ledger has not
// seen: claimed (running, its first attempt counted and req.Facts
// recorded, when req.Running) at fence 1 by req.Owner until now+req.Lease,
// with the caller's identity fields and no outcome.
func NewClaim(req ClaimRequest, now time.Time) Operation {
	op := req.Op
	op.State = capstan.OutcomeClaimed
	op.LeaseOwner = req.Owner
	op.LeaseExpiresAt = now.Add(req.Lease)
	op.Fence = 1
	op.AttemptCount = 0
	op.ExternalID, op.Result, op.Error, op.Facts = "", nil, "", nil
	op.CreatedAt, op.UpdatedAt = now, now
	markRunningAtClaim(&op, req)
	return op
}

// markRunningAtClaim makes a granted claim of a ClaimRequest with Running
// what MarkRunning(req.Facts) would have made it: running, this attempt
// counted, its facts recorded.
func markRunningAtClaim(op *Operation, req ClaimRequest) {
	if req.Running {
		op.State = capstan.OutcomeRunning
		op.AttemptCount++
		op.Facts = req.Facts
	}
}

// DecideClaim is the claim rule for an existing operation cur. It returns
// ErrConflict (wrapped) when req carries another request hash. When the
// status is Claimed the caller writes Reclaim(cur, req, now) under cur's
// fence; otherwise the operation is left as it is and returned to the
// claimer.
func DecideClaim(cur Operation, req ClaimRequest, now time.Time) (ClaimStatus, error) {
	if cur.RequestHash != req.Op.RequestHash {
		return "", fmt.Errorf("request hash %q differs from the recorded %q: %w",
			req.Op.RequestHash, cur.RequestHash, ErrConflict)
	}
	switch cur.State {
	case capstan.OutcomeSucceeded:
		return AlreadySucceeded, nil
	case capstan.OutcomeDeclared, capstan.OutcomeAbsent, capstan.OutcomeFailed:
		// Nothing was sent, or it definitely failed: free to take.
		return Claimed, nil
	case capstan.OutcomeClaimed:
		// Nothing has been sent under a claimed row, so an expired lease
		// (or the owner's own live one) can be taken over; the new fence
		// locks the previous holder out.
		if !LeaseLive(cur, now) || cur.LeaseOwner == req.Owner {
			return Claimed, nil
		}
		return InProgress, nil
	case capstan.OutcomeRunning:
		// The request may be on the wire. While the lease is live the
		// holder is presumed to be working on it, whoever asks; after it
		// expires only the external system can say what happened.
		if LeaseLive(cur, now) {
			return InProgress, nil
		}
		return MustReconcile, nil
	case capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman:
		return MustReconcile, nil
	default:
		return "", fmt.Errorf("unrecognised state %q in the ledger", cur.State)
	}
}

// Reclaim is cur as a (re)claim that DecideClaim allowed leaves it: a new
// fence, a fresh lease for req.Owner, claimed (running with the attempt
// counted and req.Facts recorded when req.Running), the caller's turn and
// tool call ids when given, and the outcome and facts of an earlier attempt
// cleared (the new attempt records its own facts when it marks the
// operation running, or with a Running claim).
// Attempts are counted across claims, so AttemptCount is kept.
func Reclaim(cur Operation, req ClaimRequest, now time.Time) Operation {
	op := cur
	op.State = capstan.OutcomeClaimed
	op.LeaseOwner = req.Owner
	op.LeaseExpiresAt = now.Add(req.Lease)
	op.Fence = cur.Fence + 1
	if req.Op.TurnID != "" {
		op.TurnID = req.Op.TurnID
	}
	if req.Op.ToolCallID != "" {
		op.ToolCallID = req.Op.ToolCallID
	}
	op.ExternalID, op.Result, op.Error, op.Facts = "", nil, "", nil
	op.UpdatedAt = now
	markRunningAtClaim(&op, req)
	return op
}

// stale is the error for a write whose fence no longer authorizes it.
func stale(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrFenced)
}

// checkFence refuses a fence that is not the operation's current one.
func checkFence(cur Operation, fence int64) error {
	if cur.Fence != fence {
		return stale("fence %d is not current, the operation is at fence %d", fence, cur.Fence)
	}
	return nil
}

// CheckMarkRunning decides whether MarkRunning under fence may change cur:
// the operation must be claimed under that fence with a live lease. Acting on
// an expired lease could race with a successor, so that too is ErrFenced and
// the caller must claim again.
func CheckMarkRunning(cur Operation, fence int64, now time.Time) error {
	if err := checkFence(cur, fence); err != nil {
		return err
	}
	switch {
	case cur.State != capstan.OutcomeClaimed:
		return stale("operation is %s, not %s", cur.State, capstan.OutcomeClaimed)
	case !LeaseLive(cur, now):
		return stale("lease expired at %s", cur.LeaseExpiresAt.Format(time.RFC3339Nano))
	}
	return nil
}

// CheckRenew decides whether Renew under fence may extend cur's lease: the
// claim must be current (claimed or running under that fence) and its lease
// still live. A lease that ran out may already be someone else's to
// reconcile, so it is not revived: ErrFenced.
func CheckRenew(cur Operation, fence int64, now time.Time) error {
	if err := checkFence(cur, fence); err != nil {
		return err
	}
	switch {
	case cur.State != capstan.OutcomeClaimed && cur.State != capstan.OutcomeRunning:
		return stale("operation is %s; only a %s or %s lease is renewed", cur.State, capstan.OutcomeClaimed, capstan.OutcomeRunning)
	case !LeaseLive(cur, now):
		return stale("lease expired at %s", cur.LeaseExpiresAt.Format(time.RFC3339Nano))
	}
	return nil
}

// CheckTakeForReconcile decides whether a reconciler may take cur: its
// outcome must be one nobody knows (unknown, needs_human, or claimed or
// running) and no lease on it may be live. A settled operation is
// ErrSettled; a live lease is a *LeaseHeldError.
func CheckTakeForReconcile(cur Operation, now time.Time) error {
	switch cur.State {
	case capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeAbsent, capstan.OutcomeDeclared:
		return fmt.Errorf("operation is %s: %w", cur.State, ErrSettled)
	case capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman, capstan.OutcomeClaimed, capstan.OutcomeRunning:
		if LeaseLive(cur, now) {
			return &LeaseHeldError{ID: cur.ID, State: cur.State, Owner: cur.LeaseOwner, ExpiresAt: cur.LeaseExpiresAt}
		}
		return nil
	default:
		return fmt.Errorf("unrecognised state %q in the ledger", cur.State)
	}
}

// completable lists the states a Complete may leave: the claim is still open.
// needs_human is included so that a person's verdict (docs/design.md §5.4) can
// be recorded under the fence the operation holds.
var completable = map[capstan.Outcome]bool{
	capstan.OutcomeClaimed:    true,
	capstan.OutcomeRunning:    true,
	capstan.OutcomeUnknown:    true,
	capstan.OutcomeNeedsHuman: true,
}

// completions lists the states a Complete may write.
var completions = map[capstan.Outcome]bool{
	capstan.OutcomeSucceeded:  true,
	capstan.OutcomeFailed:     true,
	capstan.OutcomeUnknown:    true,
	capstan.OutcomeAbsent:     true,
	capstan.OutcomeNeedsHuman: true,
}

// ValidateCompletion refuses a completion to a state that does not end an
// attempt. It needs no row, so stores call it before opening a transaction.
func ValidateCompletion(c Completion) error {
	if !completions[c.State] {
		return fmt.Errorf("cannot complete to state %q (want %s, %s, %s, %s or %s)", c.State,
			capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeUnknown, capstan.OutcomeAbsent, capstan.OutcomeNeedsHuman)
	}
	return nil
}

// CheckComplete decides whether a Complete under fence may change cur. A
// fence whose claim already ended (succeeded, failed, absent) is stale.
func CheckComplete(cur Operation, fence int64) error {
	if err := checkFence(cur, fence); err != nil {
		return err
	}
	if !completable[cur.State] {
		return stale("the claim already ended in %s", cur.State)
	}
	return nil
}

// CheckRelease decides whether Release under fence may change cur: only a
// claimed operation is released. One that may have been sent (running,
// unknown, needs_human) is never released — an error that is not ErrFenced,
// because the caller must complete it instead.
func CheckRelease(cur Operation, fence int64) error {
	if err := checkFence(cur, fence); err != nil {
		return err
	}
	switch cur.State {
	case capstan.OutcomeClaimed:
		return nil
	case capstan.OutcomeRunning, capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman:
		return fmt.Errorf("operation is %s and may have been sent; record its outcome with Complete instead", cur.State)
	default:
		return stale("the claim already ended in %s", cur.State)
	}
}

const itemRefPrefix = "sha256:"

// ItemRef is the content address of data: "sha256:" and the lowercase hex
// SHA-256 of the bytes.
func ItemRef(data []byte) string {
	sum := sha256.Sum256(data)
	return itemRefPrefix + hex.EncodeToString(sum[:])
}

// CheckItemRef refuses anything but "sha256:" followed by 64 lowercase hex
// digits, the only form ItemRef produces.
func CheckItemRef(ref string) error {
	h, ok := strings.CutPrefix(ref, itemRefPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return fmt.Errorf("malformed item reference %q, want sha256:<64 hex digits>", ref)
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("malformed item reference %q, want sha256:<64 lowercase hex digits>", ref)
		}
	}
	return nil
}

// CheckItem verifies that data, read back under ref, still hashes to ref.
func CheckItem(ref string, data []byte) error {
	if got := ItemRef(data); got != ref {
		return fmt.Errorf("stored bytes are corrupt (they hash to %s)", got)
	}
	return nil
}

// ItemsInOrder is what GetItems returns: the bytes found under each of refs,
// in refs' order (an empty item as empty, not nil), or ErrNotFound naming
// the first reference the store did not have. store names the store in the
// error.
func ItemsInOrder(refs []string, found map[string][]byte, store string) ([][]byte, error) {
	out := make([][]byte, len(refs))
	for i, ref := range refs {
		data, ok := found[ref]
		if !ok {
			return nil, fmt.Errorf("%s: get item %s: %w", store, ref, ErrNotFound)
		}
		if data == nil {
			data = []byte{}
		}
		out[i] = data
	}
	return out, nil
}
