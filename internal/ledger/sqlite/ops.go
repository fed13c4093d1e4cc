package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

const opColumns = `operation_id, tenant, task_id, turn_id, tool_call_id, kind,
	business_key, request_hash, state, lease_owner, lease_expires_at, fence,
	attempt_count, external_id, result, error, created_at, updated_at`

type scanner interface{ Scan(dest ...any) error }

func scanOp(r scanner) (ledger.Operation, error) {
	var (
		op               ledger.Operation
		state            string
		lease            sql.NullInt64
		created, updated sql.NullInt64
	)
	err := r.Scan(&op.ID, &op.Tenant, &op.TaskID, &op.TurnID, &op.ToolCallID, &op.Kind,
		&op.BusinessKey, &op.RequestHash, &state, &op.LeaseOwner, &lease, &op.Fence,
		&op.AttemptCount, &op.ExternalID, &op.Result, &op.Error, &created, &updated)
	if err != nil {
		return ledger.Operation{}, err
	}
	op.State = ledger.State(state)
	op.LeaseExpiresAt = fromNanos(lease)
	op.CreatedAt = fromNanos(created)
	op.UpdatedAt = fromNanos(updated)
	return op, nil
}

// getOp reads one operation; a missing row is ledger.ErrNotFound (unwrapped;
// callers add context).
func getOp(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (ledger.Operation, error) {
	op, err := scanOp(q.QueryRowContext(ctx,
		"SELECT "+opColumns+" FROM operations WHERE operation_id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Operation{}, ledger.ErrNotFound
	}
	return op, err
}

// leaseLive reports whether op's lease is still held at now. A lease expires
// at LeaseExpiresAt exactly.
func leaseLive(op ledger.Operation, now time.Time) bool {
	return !op.LeaseExpiresAt.IsZero() && now.Before(op.LeaseExpiresAt)
}

// decide is the claim rule for an existing operation whose request hash
// matches. It does not look at the database.
func decide(cur ledger.Operation, owner string, now time.Time) (ledger.ClaimStatus, error) {
	switch cur.State {
	case ledger.StateSucceeded:
		return ledger.AlreadySucceeded, nil
	case ledger.StateDeclared, ledger.StateAbsent, ledger.StateFailed:
		// Nothing was sent, or it definitely failed: free to take.
		return ledger.Claimed, nil
	case ledger.StateClaimed:
		// Nothing has been sent under a CLAIMED row, so an expired lease
		// (or the owner's own live one) can be taken over; the new fence
		// locks the previous holder out.
		if !leaseLive(cur, now) || cur.LeaseOwner == owner {
			return ledger.Claimed, nil
		}
		return ledger.InProgress, nil
	case ledger.StateRunning:
		// The request may be on the wire. While the lease is live the
		// holder is presumed to be working on it, whoever asks; after it
		// expires only the external system can say what happened.
		if leaseLive(cur, now) {
			return ledger.InProgress, nil
		}
		return ledger.MustReconcile, nil
	case ledger.StateUnknown, ledger.StateNeedsHuman:
		return ledger.MustReconcile, nil
	default:
		return "", fmt.Errorf("unrecognised state %q in the ledger", cur.State)
	}
}

// Claim implements ledger.Store.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	id := req.Op.ID
	switch {
	case id == "":
		return ledger.ClaimResult{}, errors.New("ledger/sqlite: claim: empty operation id")
	case req.Owner == "":
		return ledger.ClaimResult{}, fmt.Errorf("ledger/sqlite: claim %q: empty owner", id)
	case req.Lease <= 0:
		return ledger.ClaimResult{}, fmt.Errorf("ledger/sqlite: claim %q: lease %v, want > 0", id, req.Lease)
	}
	var res ledger.ClaimResult
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		cur, err := getOp(ctx, tx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			op := req.Op
			op.State = ledger.StateClaimed
			op.LeaseOwner = req.Owner
			op.LeaseExpiresAt = now.Add(req.Lease)
			op.Fence = 1
			op.AttemptCount = 0
			op.ExternalID, op.Result, op.Error = "", nil, ""
			op.CreatedAt, op.UpdatedAt = now, now
			_, err := tx.ExecContext(ctx, "INSERT INTO operations ("+opColumns+`)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				op.ID, op.Tenant, op.TaskID, op.TurnID, op.ToolCallID, op.Kind,
				op.BusinessKey, op.RequestHash, string(op.State), op.LeaseOwner,
				toNanos(op.LeaseExpiresAt), op.Fence, op.AttemptCount, op.ExternalID,
				op.Result, op.Error, toNanos(op.CreatedAt), toNanos(op.UpdatedAt))
			if err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			res = ledger.ClaimResult{Status: ledger.Claimed, Op: op}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if cur.RequestHash != req.Op.RequestHash {
			return fmt.Errorf("request hash %q differs from the recorded %q: %w",
				req.Op.RequestHash, cur.RequestHash, ledger.ErrConflict)
		}
		status, err := decide(cur, req.Owner, now)
		if err != nil {
			return err
		}
		if status != ledger.Claimed {
			res = ledger.ClaimResult{Status: status, Op: cur}
			return nil
		}
		// (Re)claim: a new fence, a fresh lease, and the correlation ids of
		// the caller; the outcome fields of an earlier attempt are cleared.
		op := cur
		op.State = ledger.StateClaimed
		op.LeaseOwner = req.Owner
		op.LeaseExpiresAt = now.Add(req.Lease)
		op.Fence = cur.Fence + 1
		if req.Op.TurnID != "" {
			op.TurnID = req.Op.TurnID
		}
		if req.Op.ToolCallID != "" {
			op.ToolCallID = req.Op.ToolCallID
		}
		op.ExternalID, op.Result, op.Error = "", nil, ""
		op.UpdatedAt = now
		_, err = tx.ExecContext(ctx, `UPDATE operations SET state = ?, lease_owner = ?,
			lease_expires_at = ?, fence = ?, turn_id = ?, tool_call_id = ?,
			external_id = '', result = NULL, error = '', updated_at = ?
			WHERE operation_id = ? AND fence = ?`,
			string(op.State), op.LeaseOwner, toNanos(op.LeaseExpiresAt), op.Fence,
			op.TurnID, op.ToolCallID, toNanos(now), id, cur.Fence)
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		res = ledger.ClaimResult{Status: ledger.Claimed, Op: op}
		return nil
	})
	if err != nil {
		return ledger.ClaimResult{}, fmt.Errorf("ledger/sqlite: claim %q: %w", id, err)
	}
	s.log.DebugContext(ctx, "ledger claim", "operation_id", id, "owner", req.Owner,
		"status", string(res.Status), "state", string(res.Op.State), "fence", res.Op.Fence)
	return res, nil
}

// fenced builds the error for a write whose fence no longer authorizes it and
// logs it: it is how a zombie attempt shows itself.
func (s *Store) fenced(ctx context.Context, verb, id string, fence int64, cur ledger.Operation, why string) error {
	s.log.WarnContext(ctx, "ledger rejected a stale-fence write", "op", verb,
		"operation_id", id, "fence", fence, "current_fence", cur.Fence,
		"state", string(cur.State), "reason", why)
	return fmt.Errorf("%s: %w", why, ledger.ErrFenced)
}

// writeUnderFence is every write after a claim: in one transaction it reads
// the operation, refuses a fence that is not current, lets check refuse the
// row (through stale for a write the fence no longer authorizes), and then
// runs update. The UPDATE repeats "AND fence = ?" so the row it changes is
// the one that was checked.
func (s *Store) writeUnderFence(ctx context.Context, verb, id string, fence int64,
	check func(cur ledger.Operation, now time.Time, stale func(why string) error) error,
	update func(tx *sql.Tx, now time.Time) error,
) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		cur, err := getOp(ctx, tx, id)
		if err != nil {
			return err
		}
		stale := func(why string) error { return s.fenced(ctx, verb, id, fence, cur, why) }
		if cur.Fence != fence {
			return stale(fmt.Sprintf("fence %d is not current, the operation is at fence %d", fence, cur.Fence))
		}
		if err := check(cur, now, stale); err != nil {
			return err
		}
		return update(tx, now)
	})
}

// MarkRunning implements ledger.Store. The operation must be CLAIMED under
// fence with a live lease: acting on an expired lease could race with a
// successor, so that too is ErrFenced and the caller must claim again.
func (s *Store) MarkRunning(ctx context.Context, id string, fence int64) error {
	err := s.writeUnderFence(ctx, "mark_running", id, fence,
		func(cur ledger.Operation, now time.Time, stale func(string) error) error {
			switch {
			case cur.State != ledger.StateClaimed:
				return stale(fmt.Sprintf("operation is %s, not CLAIMED", cur.State))
			case !leaseLive(cur, now):
				return stale(fmt.Sprintf("lease expired at %s", cur.LeaseExpiresAt.Format(time.RFC3339Nano)))
			}
			return nil
		},
		func(tx *sql.Tx, now time.Time) error {
			_, err := tx.ExecContext(ctx, `UPDATE operations SET state = ?,
				attempt_count = attempt_count + 1, updated_at = ?
				WHERE operation_id = ? AND fence = ?`,
				string(ledger.StateRunning), toNanos(now), id, fence)
			return err
		})
	if err != nil {
		return fmt.Errorf("ledger/sqlite: mark running %q (fence %d): %w", id, fence, err)
	}
	return nil
}

// completable lists the states a Complete may leave: the claim is still open.
// NEEDS_HUMAN is included so that a person's verdict (DESIGN §5.4 step 5) can
// be recorded under the fence the operation holds.
var completable = map[ledger.State]bool{
	ledger.StateClaimed:    true,
	ledger.StateRunning:    true,
	ledger.StateUnknown:    true,
	ledger.StateNeedsHuman: true,
}

// completions lists the states a Complete may write.
var completions = map[ledger.State]bool{
	ledger.StateSucceeded:  true,
	ledger.StateFailed:     true,
	ledger.StateUnknown:    true,
	ledger.StateAbsent:     true,
	ledger.StateNeedsHuman: true,
}

// Complete implements ledger.Store. It writes State, ExternalID, Result and
// Error as given and clears the lease expiry; LeaseOwner is kept as the last
// holder. A fence whose claim already ended (SUCCEEDED, FAILED, ABSENT) is
// stale.
func (s *Store) Complete(ctx context.Context, c ledger.Completion) error {
	if !completions[c.State] {
		return fmt.Errorf("ledger/sqlite: complete %q (fence %d): cannot complete to state %q (want SUCCEEDED, FAILED, UNKNOWN, ABSENT or NEEDS_HUMAN)",
			c.ID, c.Fence, c.State)
	}
	err := s.writeUnderFence(ctx, "complete", c.ID, c.Fence,
		func(cur ledger.Operation, _ time.Time, stale func(string) error) error {
			if !completable[cur.State] {
				return stale(fmt.Sprintf("the claim already ended in %s", cur.State))
			}
			return nil
		},
		func(tx *sql.Tx, now time.Time) error {
			_, err := tx.ExecContext(ctx, `UPDATE operations SET state = ?, external_id = ?,
				result = ?, error = ?, lease_expires_at = NULL, updated_at = ?
				WHERE operation_id = ? AND fence = ?`,
				string(c.State), c.ExternalID, c.Result, c.Error, toNanos(now), c.ID, c.Fence)
			return err
		})
	if err != nil {
		return fmt.Errorf("ledger/sqlite: complete %q (fence %d) as %s: %w", c.ID, c.Fence, c.State, err)
	}
	return nil
}

// Release implements ledger.Store: CLAIMED → ABSENT with the lease cleared.
// An operation that may have been sent (RUNNING, UNKNOWN, NEEDS_HUMAN) is
// never released; complete it instead.
func (s *Store) Release(ctx context.Context, id string, fence int64) error {
	err := s.writeUnderFence(ctx, "release", id, fence,
		func(cur ledger.Operation, _ time.Time, stale func(string) error) error {
			switch cur.State {
			case ledger.StateClaimed:
				return nil
			case ledger.StateRunning, ledger.StateUnknown, ledger.StateNeedsHuman:
				return fmt.Errorf("operation is %s and may have been sent; record its outcome with Complete instead", cur.State)
			default:
				return stale(fmt.Sprintf("the claim already ended in %s", cur.State))
			}
		},
		func(tx *sql.Tx, now time.Time) error {
			_, err := tx.ExecContext(ctx, `UPDATE operations SET state = ?, lease_owner = '',
				lease_expires_at = NULL, updated_at = ?
				WHERE operation_id = ? AND fence = ?`,
				string(ledger.StateAbsent), toNanos(now), id, fence)
			return err
		})
	if err != nil {
		return fmt.Errorf("ledger/sqlite: release %q (fence %d): %w", id, fence, err)
	}
	return nil
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, id string) (ledger.Operation, error) {
	op, err := getOp(ctx, s.r, id)
	if err != nil {
		return ledger.Operation{}, fmt.Errorf("ledger/sqlite: get %q: %w", id, err)
	}
	return op, nil
}

// ListByTask implements ledger.Store: the task's operations ordered by
// creation time, then id. A task with none gives an empty slice.
func (s *Store) ListByTask(ctx context.Context, taskID string) ([]ledger.Operation, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+opColumns+
		" FROM operations WHERE task_id = ? ORDER BY created_at, operation_id", taskID)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err)
	}
	defer rows.Close()
	ops := []ledger.Operation{}
	for rows.Next() {
		op, err := scanOp(rows)
		if err != nil {
			return nil, fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err)
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err)
	}
	return ops, nil
}

// TakeForReconcile implements ledger.Store. The take is one compare-and-set
// UPDATE: it changes the row only if its state may hide an unknown outcome
// and no lease on it is live, and it bumps the fence in place. When it
// changes nothing, the row is read in the same transaction to say why.
func (s *Store) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (ledger.Operation, error) {
	switch {
	case id == "":
		return ledger.Operation{}, errors.New("ledger/sqlite: take for reconcile: empty operation id")
	case owner == "":
		return ledger.Operation{}, fmt.Errorf("ledger/sqlite: take %q for reconcile: empty owner", id)
	case lease <= 0:
		return ledger.Operation{}, fmt.Errorf("ledger/sqlite: take %q for reconcile: lease %v, want > 0", id, lease)
	}
	var op ledger.Operation
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		res, err := tx.ExecContext(ctx, `UPDATE operations SET fence = fence + 1, lease_owner = ?,
			lease_expires_at = ?, updated_at = ?
			WHERE operation_id = ? AND state IN (?, ?, ?, ?)
			AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`,
			owner, toNanos(now.Add(lease)), toNanos(now), id,
			string(ledger.StateUnknown), string(ledger.StateNeedsHuman),
			string(ledger.StateClaimed), string(ledger.StateRunning), toNanos(now))
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		if op, err = getOp(ctx, tx, id); err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		switch op.State {
		case ledger.StateSucceeded, ledger.StateFailed, ledger.StateAbsent, ledger.StateDeclared:
			return fmt.Errorf("operation is %s: %w", op.State, ledger.ErrSettled)
		case ledger.StateUnknown, ledger.StateNeedsHuman, ledger.StateClaimed, ledger.StateRunning:
			return &ledger.LeaseHeldError{ID: id, State: op.State, Owner: op.LeaseOwner, ExpiresAt: op.LeaseExpiresAt}
		default:
			return fmt.Errorf("unrecognised state %q in the ledger", op.State)
		}
	})
	switch {
	case errors.Is(err, ledger.ErrSettled):
		// The caller reports what the ledger already knows.
		return op, fmt.Errorf("ledger/sqlite: take %q for reconcile: %w", id, err)
	case err != nil:
		return ledger.Operation{}, fmt.Errorf("ledger/sqlite: take %q for reconcile: %w", id, err)
	}
	s.log.DebugContext(ctx, "ledger take for reconcile", "operation_id", id, "owner", owner,
		"state", string(op.State), "fence", op.Fence)
	return op, nil
}
