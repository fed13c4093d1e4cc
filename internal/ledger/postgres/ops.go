package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

const opColumns = `operation_id, tenant, task_id, turn_id, tool_call_id, kind,
	business_key, request_hash, state, lease_owner, lease_expires_at, fence,
	attempt_count, external_id, result, error, created_at, updated_at, facts`

func scanOp(r pgx.Row) (ledger.Operation, error) {
	var (
		op    ledger.Operation
		state string
		lease *time.Time
	)
	err := r.Scan(&op.ID, &op.Tenant, &op.TaskID, &op.TurnID, &op.ToolCallID, &op.Kind,
		&op.BusinessKey, &op.RequestHash, &state, &op.LeaseOwner, &lease, &op.Fence,
		&op.AttemptCount, &op.ExternalID, &op.Result, &op.Error, &op.CreatedAt, &op.UpdatedAt, &op.Facts)
	if err != nil {
		return ledger.Operation{}, err
	}
	op.State = ledger.StateOf(state)
	if lease != nil {
		op.LeaseExpiresAt = lease.UTC()
	}
	op.CreatedAt, op.UpdatedAt = op.CreatedAt.UTC(), op.UpdatedAt.UTC()
	return op, nil
}

// getOp reads one operation, locking its row until the transaction ends when
// forUpdate; a missing row is ledger.ErrNotFound (unwrapped; callers add
// context).
func getOp(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string, forUpdate bool) (ledger.Operation, error) {
	query := "SELECT " + opColumns + " FROM operations WHERE operation_id = $1"
	if forUpdate {
		query += " FOR UPDATE"
	}
	op, err := scanOp(q.QueryRow(ctx, query, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Operation{}, ledger.ErrNotFound
	}
	return op, err
}

// lockOp reads one operation and locks its row until tx ends, then reads
// the database's clock (dbNow; nowArg is s.nowArg()): both in one round
// trip, the clock read after the lock is held, so a decision on the row is
// made at the time the row was read as it stands, however long the lock
// took. A missing row is ledger.ErrNotFound (unwrapped).
func lockOp(ctx context.Context, tx pgx.Tx, id string, nowArg any) (ledger.Operation, time.Time, error) {
	b := &pgx.Batch{}
	b.Queue("SELECT "+opColumns+" FROM operations WHERE operation_id = $1 FOR UPDATE", id)
	b.Queue("SELECT "+dbNow(1), nowArg)
	br := tx.SendBatch(ctx, b)
	op, opErr := scanOp(br.QueryRow())
	var now time.Time
	nowErr := br.QueryRow().Scan(&now)
	closeErr := br.Close()
	switch {
	case errors.Is(opErr, pgx.ErrNoRows):
		return ledger.Operation{}, time.Time{}, ledger.ErrNotFound
	case opErr != nil:
		return ledger.Operation{}, time.Time{}, opErr
	case nowErr != nil:
		return ledger.Operation{}, time.Time{}, fmt.Errorf("read the database's clock: %w", nowErr)
	case closeErr != nil:
		return ledger.Operation{}, time.Time{}, closeErr
	}
	return op, now.UTC(), nil
}

// Claim implements ledger.Store. A new id is one INSERT … ON CONFLICT DO
// NOTHING, so of concurrent first claims exactly one inserts; a known id is
// decided by ledger.DecideClaim with its row locked.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	id := req.Op.ID
	if err := ledger.ValidateClaim(req); err != nil {
		return ledger.ClaimResult{}, unavailable(fmt.Errorf("ledger/postgres: claim %q: %w", id, err))
	}
	var res ledger.ClaimResult
	var err error
	if d, ok := ledger.ClaimDecision(req); ok {
		res, err = s.claimNewDecided(ctx, req, d)
	} else {
		res, err = s.claimNew(ctx, req)
	}
	if err == nil && res.Status == "" {
		decision, created := res.Decision, res.DecisionCreated
		res, err = s.claimExisting(ctx, req)
		res.Decision, res.DecisionCreated = decision, created
	}
	switch {
	case errors.Is(err, ledger.ErrConflict):
		// The claim rule's answer: a decision it carried is recorded.
		return ledger.ClaimResult{Decision: res.Decision, DecisionCreated: res.DecisionCreated},
			fmt.Errorf("ledger/postgres: claim %q: %w", id, err)
	case err != nil:
		return ledger.ClaimResult{}, unavailable(fmt.Errorf("ledger/postgres: claim %q: %w", id, err))
	}
	s.log.DebugContext(ctx, "ledger claim", "operation_id", id, "owner", req.Owner,
		"status", string(res.Status), "state", string(res.Op.State), "fence", res.Op.Fence)
	return res, nil
}

// claimNew inserts req's operation if the id is new. It returns a zero
// result, and no error, when the id already exists. The row is stamped, and
// its lease ends, by the database's clock, read once in the INSERT.
func (s *Store) claimNew(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	op := ledger.NewClaim(req, time.Time{}) // the times are the database's, below
	var created, expires time.Time
	err := s.pool.QueryRow(ctx, "INSERT INTO operations ("+opColumns+`)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, t.now + $11::bigint * interval '1 microsecond',
			$12, $13, $14, $15, $16, t.now, t.now, $17
		FROM (SELECT `+dbNow(18)+` AS now) t
		ON CONFLICT (operation_id) DO NOTHING
		RETURNING created_at, lease_expires_at`,
		op.ID, op.Tenant, op.TaskID, op.TurnID, op.ToolCallID, op.Kind,
		op.BusinessKey, op.RequestHash, string(op.State), op.LeaseOwner,
		req.Lease.Microseconds(), op.Fence, op.AttemptCount, op.ExternalID,
		op.Result, op.Error, op.Facts, s.nowArg()).Scan(&created, &expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // the id exists
		return ledger.ClaimResult{}, nil
	case err != nil:
		return ledger.ClaimResult{}, fmt.Errorf("insert: %w", err)
	}
	op.CreatedAt, op.UpdatedAt, op.LeaseExpiresAt = created.UTC(), created.UTC(), expires.UTC()
	return ledger.ClaimResult{Status: ledger.Claimed, Op: op}, nil
}

// claimNewDecided is claimNew for a request that carries the policy's
// decision d (ledger.ClaimRequest.Decision), in one statement: it records d
// unless the operation has a decision already (RecordDecision's insert),
// and inserts the operation when the id is new and the decision that
// stands is d (ledger.SameDecision). A decision that differs is
// DecidedOtherwise, nothing claimed; a known id with d standing is a zero
// status, as claimNew's, with the decision set. The decision and the
// operation are stamped with one reading of the database's clock.
func (s *Store) claimNewDecided(ctx context.Context, req ledger.ClaimRequest, d ledger.Decision) (ledger.ClaimResult, error) {
	op := ledger.NewClaim(req, time.Time{}) // the times are the database's, below
	var stored ledger.Decision
	var created bool
	var inserted, expires *time.Time
	err := s.pool.QueryRow(ctx, `WITH t AS (SELECT `+dbNow(18)+` AS now),
		d AS (
			INSERT INTO decisions (`+decisionColumns+`)
			SELECT $1, $19, $20, $21, $22, $23, $24, $25, t.now, $26 FROM t
			ON CONFLICT (operation_id) DO UPDATE SET operation_id = decisions.operation_id
			RETURNING `+decisionColumns+`, (xmax = 0) AS created),
		o AS (
			INSERT INTO operations (`+opColumns+`)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, t.now + $11::bigint * interval '1 microsecond',
				$12, $13, $14, $15, $16, t.now, t.now, $17
			FROM t, d
			WHERE d.created OR (d.effect = $22 AND d.rule = $23 AND d.reason = $24 AND d.refused = $25 AND d.layer = $26)
			ON CONFLICT (operation_id) DO NOTHING
			RETURNING created_at, lease_expires_at)
		SELECT d.operation_id, d.tenant, d.task_id, d.tool, d.effect, d.rule, d.reason, d.refused, d.created_at, d.layer,
			d.created, o.created_at, o.lease_expires_at
		FROM d LEFT JOIN o ON true`,
		op.ID, op.Tenant, op.TaskID, op.TurnID, op.ToolCallID, op.Kind,
		op.BusinessKey, op.RequestHash, string(op.State), op.LeaseOwner,
		req.Lease.Microseconds(), op.Fence, op.AttemptCount, op.ExternalID,
		op.Result, op.Error, op.Facts, s.nowArg(),
		d.Tenant, d.TaskID, d.Tool, d.Effect, d.Rule, d.Reason, d.Refused, d.Layer).Scan(
		&stored.OperationID, &stored.Tenant, &stored.TaskID, &stored.Tool, &stored.Effect, &stored.Rule, &stored.Reason,
		&stored.Refused, &stored.CreatedAt, &stored.Layer, &created, &inserted, &expires)
	if err != nil {
		return ledger.ClaimResult{}, fmt.Errorf("record decision and insert: %w", err)
	}
	stored.CreatedAt = stored.CreatedAt.UTC()
	res := ledger.ClaimResult{Decision: &stored, DecisionCreated: created}
	switch {
	case !ledger.SameDecision(stored, d):
		res.Status = ledger.DecidedOtherwise
	case inserted != nil && expires != nil:
		op.CreatedAt, op.UpdatedAt, op.LeaseExpiresAt = inserted.UTC(), inserted.UTC(), expires.UTC()
		res.Status, res.Op = ledger.Claimed, op
	}
	return res, nil
}

// claimExisting decides a claim of a known id with its row locked, and
// writes the reclaim when the decision is Claimed.
func (s *Store) claimExisting(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	var res ledger.ClaimResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, now, err := lockOp(ctx, tx, req.Op.ID, s.nowArg())
		if err != nil {
			// Operations are never deleted, so the row the INSERT
			// collided with is there; ErrNotFound here is a fault.
			return fmt.Errorf("read: %w", err)
		}
		status, err := ledger.DecideClaim(cur, req, now)
		if err != nil {
			return err
		}
		if status != ledger.Claimed {
			res = ledger.ClaimResult{Status: status, Op: cur}
			return nil
		}
		op := ledger.Reclaim(cur, req, now)
		op.LeaseExpiresAt = op.LeaseExpiresAt.Truncate(time.Microsecond)
		_, err = tx.Exec(ctx, `UPDATE operations SET state = $1, lease_owner = $2,
			lease_expires_at = $3, fence = $4, turn_id = $5, tool_call_id = $6, attempt_count = $7,
			external_id = '', result = NULL, error = '', facts = $8, updated_at = $9
			WHERE operation_id = $10 AND fence = $11`,
			string(op.State), op.LeaseOwner, op.LeaseExpiresAt, op.Fence,
			op.TurnID, op.ToolCallID, op.AttemptCount, op.Facts, now, cur.ID, cur.Fence)
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		res = ledger.ClaimResult{Status: ledger.Claimed, Op: op}
		return nil
	})
	return res, err
}

// writeUnderFence is every write after a claim: in one transaction it reads
// and locks the operation and reads the database's clock (lockOp), lets
// check (one of ledger's Check rules) refuse it at that time, and then runs
// update, which stamps the row with it. The UPDATE repeats "AND fence = $n" so the row
// it changes is the one that was checked. A stale-fence refusal is logged
// (ledger.LogStaleFence).
func (s *Store) writeUnderFence(ctx context.Context, verb, id string, fence int64,
	check func(cur ledger.Operation, now time.Time) error,
	update func(tx pgx.Tx, now time.Time) error,
) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, now, err := lockOp(ctx, tx, id, s.nowArg())
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
		func(tx pgx.Tx, now time.Time) error {
			_, err := tx.Exec(ctx, `UPDATE operations SET state = $1,
				attempt_count = attempt_count + 1, facts = $2, updated_at = $3
				WHERE operation_id = $4 AND fence = $5`,
				string(capstan.OutcomeRunning), facts, now, id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/postgres: mark running %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Renew implements ledger.Store under ledger.CheckRenew.
func (s *Store) Renew(ctx context.Context, id string, fence int64, lease time.Duration) error {
	err := s.writeUnderFence(ctx, "renew", id, fence,
		func(cur ledger.Operation, now time.Time) error { return ledger.CheckRenew(cur, fence, now) },
		func(tx pgx.Tx, now time.Time) error {
			_, err := tx.Exec(ctx, `UPDATE operations SET lease_expires_at = $1, updated_at = $2
				WHERE operation_id = $3 AND fence = $4`,
				now.Add(lease), now, id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/postgres: renew %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Complete implements ledger.Store under ledger.CheckComplete. It writes
// State, ExternalID, Result and Error as given and clears the lease expiry;
// LeaseOwner is kept as the last holder. The UPDATE and the inserts of its
// Items go to the server as one batch inside the transaction.
func (s *Store) Complete(ctx context.Context, c ledger.Completion) error {
	err := ledger.ValidateCompletion(c)
	if err == nil {
		err = s.writeUnderFence(ctx, "complete", c.ID, c.Fence,
			func(cur ledger.Operation, _ time.Time) error { return ledger.CheckComplete(cur, c.Fence) },
			func(tx pgx.Tx, now time.Time) error {
				b := &pgx.Batch{}
				b.Queue(`UPDATE operations SET state = $1, external_id = $2,
					result = $3, error = $4, lease_expires_at = NULL, updated_at = $5
					WHERE operation_id = $6 AND fence = $7`,
					string(c.State), c.ExternalID, c.Result, c.Error, now, c.ID, c.Fence)
				if err := s.queueItems(ctx, b, c.Items, now); err != nil {
					return err
				}
				return tx.SendBatch(ctx, b).Close()
			})
	}
	if err != nil {
		return unavailable(fmt.Errorf("ledger/postgres: complete %q (fence %d) as %s: %w", c.ID, c.Fence, c.State, err))
	}
	return nil
}

// Release implements ledger.Store under ledger.CheckRelease: claimed →
// absent with the lease cleared.
func (s *Store) Release(ctx context.Context, id string, fence int64) error {
	err := s.writeUnderFence(ctx, "release", id, fence,
		func(cur ledger.Operation, _ time.Time) error { return ledger.CheckRelease(cur, fence) },
		func(tx pgx.Tx, now time.Time) error {
			_, err := tx.Exec(ctx, `UPDATE operations SET state = $1, lease_owner = '',
				lease_expires_at = NULL, updated_at = $2
				WHERE operation_id = $3 AND fence = $4`,
				string(capstan.OutcomeAbsent), now, id, fence)
			return err
		})
	if err != nil {
		return unavailable(fmt.Errorf("ledger/postgres: release %q (fence %d): %w", id, fence, err))
	}
	return nil
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, id string) (ledger.Operation, error) {
	op, err := getOp(ctx, s.pool, id, false)
	if err != nil {
		return ledger.Operation{}, unavailable(fmt.Errorf("ledger/postgres: get %q: %w", id, err))
	}
	return op, nil
}

// ListByTask implements ledger.Store: the task's operations ordered by
// creation time, then id. A task with none gives an empty slice.
func (s *Store) ListByTask(ctx context.Context, taskID string) ([]ledger.Operation, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+opColumns+
		" FROM operations WHERE task_id = $1 ORDER BY created_at, operation_id", taskID)
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: list task %q: %w", taskID, err))
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Operation, error) { return scanOp(r) })
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: list task %q: %w", taskID, err))
	}
	if ops == nil {
		ops = []ledger.Operation{}
	}
	return ops, nil
}

// TakeForReconcile implements ledger.Store under
// ledger.CheckTakeForReconcile: the row is locked, checked and given the
// next fence in one transaction.
func (s *Store) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (ledger.Operation, error) {
	switch {
	case id == "":
		return ledger.Operation{}, errors.New("ledger/postgres: take for reconcile: empty operation id")
	case owner == "":
		return ledger.Operation{}, fmt.Errorf("ledger/postgres: take %q for reconcile: empty owner", id)
	case lease <= 0:
		return ledger.Operation{}, fmt.Errorf("ledger/postgres: take %q for reconcile: lease %v, want > 0", id, lease)
	}
	var op ledger.Operation
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, now, err := lockOp(ctx, tx, id, s.nowArg())
		if err != nil {
			return err
		}
		op = cur
		if err := ledger.CheckTakeForReconcile(cur, now); err != nil {
			return err
		}
		op, err = scanOp(tx.QueryRow(ctx, `UPDATE operations SET fence = fence + 1, lease_owner = $1,
			lease_expires_at = $2, updated_at = $3 WHERE operation_id = $4 RETURNING `+opColumns,
			owner, now.Add(lease), now, id))
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrSettled):
		return op, unavailable(fmt.Errorf("ledger/postgres: take %q for reconcile: %w", id, err)) // the caller reports what the ledger knows
	case err != nil:
		return ledger.Operation{}, unavailable(fmt.Errorf("ledger/postgres: take %q for reconcile: %w", id, err))
	}
	return op, nil
}
