package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

const decisionColumns = "operation_id, tenant, task_id, tool, effect, rule, reason, refused, created_at, layer"

// RecordDecision implements ledger.Store: recordDecision in one write
// transaction, so the first record of an operation wins.
func (s *Store) RecordDecision(ctx context.Context, d ledger.Decision) (ledger.Decision, bool, error) {
	if d.OperationID == "" {
		return d, false, fmt.Errorf("ledger/sqlite: record decision: empty operation id")
	}
	var stored ledger.Decision
	var created bool
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		stored, created, err = s.recordDecision(ctx, tx, d, s.now().UTC())
		return err
	})
	if err != nil {
		return ledger.Decision{}, false, unavailable(fmt.Errorf("ledger/sqlite: record decision on %s: %w", d.OperationID, err))
	}
	return stored, created, nil
}

// recordDecision records d in tx, stamped now, unless its operation has a
// decision already (INSERT OR IGNORE), and returns the decision that
// stands and whether it is d. Only a decision it did not insert is read
// back: an inserted one is d as written.
func (s *Store) recordDecision(ctx context.Context, tx *sql.Tx, d ledger.Decision, now time.Time) (ledger.Decision, bool, error) {
	res, err := s.exec(ctx, tx, sqlInsertDecision,
		d.OperationID, d.Tenant, d.TaskID, d.Tool, d.Effect, d.Rule, d.Reason, d.Refused, toNanos(now), d.Layer)
	if err != nil {
		return ledger.Decision{}, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ledger.Decision{}, false, err
	}
	if n == 1 {
		d.CreatedAt = fromNanos(toNanos(now))
		return d, true, nil
	}
	stored, err := scanDecision(s.queryRowTx(ctx, tx, sqlGetDecision, d.OperationID))
	return stored, false, err
}

// Decisions implements ledger.Store.
func (s *Store) Decisions(ctx context.Context, taskID string) ([]ledger.Decision, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+decisionColumns+" FROM decisions WHERE task_id = ? ORDER BY created_at, operation_id", taskID)
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: list decisions of %q: %w", taskID, err))
	}
	defer rows.Close()
	out := []ledger.Decision{}
	for rows.Next() {
		d, err := scanDecision(rows)
		if err != nil {
			return nil, unavailable(fmt.Errorf("ledger/sqlite: list decisions of %q: %w", taskID, err))
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: list decisions of %q: %w", taskID, err))
	}
	return out, nil
}

func scanDecision(r interface{ Scan(...any) error }) (ledger.Decision, error) {
	var d ledger.Decision
	var created sql.NullInt64
	err := r.Scan(&d.OperationID, &d.Tenant, &d.TaskID, &d.Tool, &d.Effect, &d.Rule, &d.Reason, &d.Refused, &created, &d.Layer)
	d.CreatedAt = fromNanos(created)
	return d, err
}
