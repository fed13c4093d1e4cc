package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

const opColumns = `operation_id, tenant, task_id, turn_id, tool_call_id, kind,
	business_key, request_hash, state, lease_owner, lease_expires_at, fence,
	attempt_count, external_id, result, error, created_at, updated_at, facts`

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
		&op.AttemptCount, &op.ExternalID, &op.Result, &op.Error, &created, &updated, &op.Facts)
	if err != nil {
		return ledger.Operation{}, err
	}
	op.State = ledger.StateOf(state)
	op.LeaseExpiresAt = fromNanos(lease)
	op.CreatedAt = fromNanos(created)
	op.UpdatedAt = fromNanos(updated)
	return op, nil
}

// getOp reads one operation, in tx or, when tx is nil, on a reader; a
// missing row is ledger.ErrNotFound (unwrapped; callers add context).
func (s *Store) getOp(ctx context.Context, tx *sql.Tx, id string) (ledger.Operation, error) {
	var row *sql.Row
	if tx != nil {
		row = s.queryRowTx(ctx, tx, sqlGetOp, id)
	} else {
		row = s.queryRow(ctx, sqlGetOp, id)
	}
	op, err := scanOp(row)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Operation{}, ledger.ErrNotFound
	}
	return op, err
}

// Claim implements ledger.Store. The decision the request carries (if
// any), the read, the claim rule (ledger.DecideClaim) and the write are one
// BEGIN IMMEDIATE transaction. The rule's refusal (ErrConflict) is the
// claim's answer, not a failed write: the decision recorded with it is
// committed.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	id := req.Op.ID
	if err := ledger.ValidateClaim(req); err != nil {
		return ledger.ClaimResult{}, unavailable(fmt.Errorf("ledger/sqlite: claim %q: %w", id, err))
	}
	var res ledger.ClaimResult
	var refusal error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		res, refusal = ledger.ClaimResult{}, nil
		if d, ok := ledger.ClaimDecision(req); ok {
			stored, created, err := s.recordDecision(ctx, tx, d, now)
			if err != nil {
				return fmt.Errorf("record decision: %w", err)
			}
			res.Decision, res.DecisionCreated = &stored, created
			if !ledger.SameDecision(stored, d) {
				res.Status = ledger.DecidedOtherwise
				return nil
			}
		}
		var err error
		res.Status, res.Op, err = s.claimTx(ctx, tx, req, now)
		if errors.Is(err, ledger.ErrConflict) {
			refusal = err
			return nil
		}
		return err
	})
	if err != nil {
		return ledger.ClaimResult{}, unavailable(fmt.Errorf("ledger/sqlite: claim %q: %w", id, err))
	}
	if refusal != nil {
		return ledger.ClaimResult{Decision: res.Decision, DecisionCreated: res.DecisionCreated},
			fmt.Errorf("ledger/sqlite: claim %q: %w", id, refusal)
	}
	s.log.DebugContext(ctx, "ledger claim", "operation_id", id, "owner", req.Owner,
		"status", string(res.Status), "state", string(res.Op.State), "fence", res.Op.Fence)
	return res, nil
}

// claimTx is Claim's read, rule and write in tx, at now.
func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest, now time.Time) (ledger.ClaimStatus, ledger.Operation, error) {
	id := req.Op.ID
	cur, err := s.getOp(ctx, tx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		op := ledger.NewClaim(req, now)
		_, err := s.exec(ctx, tx, sqlInsertOp, op.ID, op.Tenant, op.TaskID, op.TurnID, op.ToolCallID, op.Kind,
			op.BusinessKey, op.RequestHash, string(op.State), op.LeaseOwner,
			toNanos(op.LeaseExpiresAt), op.Fence, op.AttemptCount, op.ExternalID,
			op.Result, op.Error, toNanos(op.CreatedAt), toNanos(op.UpdatedAt), op.Facts)
		if err != nil {
			return "", ledger.Operation{}, fmt.Errorf("insert: %w", err)
		}
		return ledger.Claimed, op, nil
	}
	if err != nil {
		return "", ledger.Operation{}, fmt.Errorf("read: %w", err)
	}
	status, err := ledger.DecideClaim(cur, req, now)
	if err != nil || status != ledger.Claimed {
		return status, cur, err
	}
	op := ledger.Reclaim(cur, req, now)
	_, err = s.exec(ctx, tx, sqlReclaim, string(op.State), op.LeaseOwner, toNanos(op.LeaseExpiresAt), op.Fence,
		op.TurnID, op.ToolCallID, op.AttemptCount, op.Facts, toNanos(now), id, cur.Fence)
	if err != nil {
		return "", ledger.Operation{}, fmt.Errorf("update: %w", err)
	}
	return ledger.Claimed, op, nil
}

// writeUnderFence is every write after a claim: in one transaction it reads
// the operation, lets check (one of ledger's Check rules) refuse it, and then
// runs update. The UPDATE repeats "AND fence = ?" so the row it changes is
// the one that was checked. A stale-fence refusal is logged
// (ledger.LogStaleFence).
func (s *Store) writeUnderFence(ctx context.Context, verb, id string, fence int64,
	check func(cur ledger.Operation, now time.Time) error,
	update func(tx *sql.Tx, now time.Time) error,
) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		cur, err := s.getOp(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := check(cur, now); err != nil {
			ledger.LogStaleFence(ctx, s.log, verb, cur, fence, err)
			return err
		}
		return update(tx, now)
	})
}

// MarkRunning implements ledger.Store under ledger.CheckMarkRunning. It
// writes facts as given: nil stores NULL.
func (s *Store) MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error {
	err := s.writeUnderFence(ctx, "mark_running", id, fence,
		func(cur ledger.Operation, now time.Time) error { return ledger.CheckMarkRunning(cur, fence, now) },
		func(tx *sql.Tx, now time.Time) error {
			_, err := s.exec(ctx, tx, sqlMarkRunning, string(capstan.OutcomeRunning), facts, toNanos(now), id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: mark running %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Renew implements ledger.Store under ledger.CheckRenew.
func (s *Store) Renew(ctx context.Context, id string, fence int64, lease time.Duration) error {
	err := s.writeUnderFence(ctx, "renew", id, fence,
		func(cur ledger.Operation, now time.Time) error { return ledger.CheckRenew(cur, fence, now) },
		func(tx *sql.Tx, now time.Time) error {
			_, err := s.exec(ctx, tx, sqlRenew, toNanos(now.Add(lease)), toNanos(now), id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: renew %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Complete implements ledger.Store under ledger.CheckComplete. It writes
// State, ExternalID, Result and Error as given and clears the lease expiry;
// LeaseOwner is kept as the last holder. Its Items are inserted in the same
// transaction.
func (s *Store) Complete(ctx context.Context, c ledger.Completion) error {
	err := ledger.ValidateCompletion(c)
	if err == nil {
		err = s.writeUnderFence(ctx, "complete", c.ID, c.Fence,
			func(cur ledger.Operation, _ time.Time) error { return ledger.CheckComplete(cur, c.Fence) },
			func(tx *sql.Tx, now time.Time) error {
				_, err := s.exec(ctx, tx, sqlComplete, string(c.State), c.ExternalID, c.Result, c.Error, toNanos(now), c.ID, c.Fence)
				if err != nil {
					return err
				}
				return s.putItems(ctx, tx, c.Items, now)
			})
	}
	if err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: complete %q (fence %d) as %s: %w", c.ID, c.Fence, c.State, err))
	}
	return nil
}

// Release implements ledger.Store under ledger.CheckRelease: claimed →
// absent with the lease cleared.
func (s *Store) Release(ctx context.Context, id string, fence int64) error {
	err := s.writeUnderFence(ctx, "release", id, fence,
		func(cur ledger.Operation, _ time.Time) error { return ledger.CheckRelease(cur, fence) },
		func(tx *sql.Tx, now time.Time) error {
			_, err := s.exec(ctx, tx, sqlReleaseOp, string(capstan.OutcomeAbsent), toNanos(now), id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: release %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, id string) (ledger.Operation, error) {
	op, err := s.getOp(ctx, nil, id)
	if err != nil {
		return ledger.Operation{}, unavailable(fmt.Errorf("ledger/sqlite: get %q: %w", id, err))
	}
	return op, nil
}

// ListByTask implements ledger.Store: the task's operations ordered by
// creation time, then id. A task with none gives an empty slice.
func (s *Store) ListByTask(ctx context.Context, taskID string) ([]ledger.Operation, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+opColumns+
		" FROM operations WHERE task_id = ? ORDER BY created_at, operation_id", taskID)
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err))
	}
	defer rows.Close()
	ops := []ledger.Operation{}
	for rows.Next() {
		op, err := scanOp(rows)
		if err != nil {
			return nil, unavailable(fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err))
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: list task %q: %w", taskID, err))
	}
	return ops, nil
}

// reconcilable are the state column's values TakeForReconcile takes: the
// states that may hide an unknown outcome, as this release and older ones
// wrote them.
var reconcilable = ledger.Spellings(capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman, capstan.OutcomeClaimed, capstan.OutcomeRunning)

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
		args := []any{owner, toNanos(now.Add(lease)), toNanos(now), id, toNanos(now)}
		args = append(args, reconcilable...)
		res, err := tx.ExecContext(ctx, `UPDATE operations SET fence = fence + 1, lease_owner = ?,
			lease_expires_at = ?, updated_at = ?
			WHERE operation_id = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
			AND state IN (?`+strings.Repeat(", ?", len(reconcilable)-1)+`)`, args...)
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		if op, err = s.getOp(ctx, tx, id); err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		switch op.State {
		case capstan.OutcomeSucceeded, capstan.OutcomeFailed, capstan.OutcomeAbsent, capstan.OutcomeDeclared:
			return fmt.Errorf("operation is %s: %w", op.State, ledger.ErrSettled)
		case capstan.OutcomeUnknown, capstan.OutcomeNeedsHuman, capstan.OutcomeClaimed, capstan.OutcomeRunning:
			return &ledger.LeaseHeldError{ID: id, State: op.State, Owner: op.LeaseOwner, ExpiresAt: op.LeaseExpiresAt}
		default:
			return fmt.Errorf("unrecognised state %q in the ledger", op.State)
		}
	})
	switch {
	case errors.Is(err, ledger.ErrSettled):
		// The caller reports what the ledger already knows.
		return op, unavailable(fmt.Errorf("ledger/sqlite: take %q for reconcile: %w", id, err))
	case err != nil:
		return ledger.Operation{}, unavailable(fmt.Errorf("ledger/sqlite: take %q for reconcile: %w", id, err))
	}
	s.log.DebugContext(ctx, "ledger take for reconcile", "operation_id", id, "owner", owner,
		"state", string(op.State), "fence", op.Fence)
	return op, nil
}
