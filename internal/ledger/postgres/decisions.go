package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan/internal/ledger"
)

const decisionColumns = "operation_id, tenant, task_id, tool, effect, rule, reason, refused, created_at, layer"

// RecordDecision implements ledger.Store in one statement: the insert, or
// when the operation has a decision already, that decision (the no-op
// update returns the existing row), with xmax = 0 telling which.
func (s *Store) RecordDecision(ctx context.Context, d ledger.Decision) (ledger.Decision, bool, error) {
	if d.OperationID == "" {
		return d, false, errors.New("ledger/postgres: record decision: empty operation id")
	}
	var stored ledger.Decision
	var created bool
	err := s.pool.QueryRow(ctx, `INSERT INTO decisions (`+decisionColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, `+dbNow(9)+`, $10)
		ON CONFLICT (operation_id) DO UPDATE SET operation_id = decisions.operation_id
		RETURNING `+decisionColumns+`, (xmax = 0)`,
		d.OperationID, d.Tenant, d.TaskID, d.Tool, d.Effect, d.Rule, d.Reason, d.Refused, s.nowArg(), d.Layer).Scan(
		&stored.OperationID, &stored.Tenant, &stored.TaskID, &stored.Tool, &stored.Effect, &stored.Rule, &stored.Reason,
		&stored.Refused, &stored.CreatedAt, &stored.Layer, &created)
	if err != nil {
		return ledger.Decision{}, false, unavailable(fmt.Errorf("ledger/postgres: record decision on %s: %w", d.OperationID, err))
	}
	stored.CreatedAt = stored.CreatedAt.UTC()
	return stored, created, nil
}

// Decisions implements ledger.Store.
func (s *Store) Decisions(ctx context.Context, taskID string) ([]ledger.Decision, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+decisionColumns+" FROM decisions WHERE task_id = $1 ORDER BY created_at, operation_id", taskID)
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: list decisions of %q: %w", taskID, err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Decision, error) {
		var d ledger.Decision
		err := r.Scan(&d.OperationID, &d.Tenant, &d.TaskID, &d.Tool, &d.Effect, &d.Rule, &d.Reason, &d.Refused, &d.CreatedAt, &d.Layer)
		d.CreatedAt = d.CreatedAt.UTC()
		return d, err
	})
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: list decisions of %q: %w", taskID, err))
	}
	if out == nil {
		out = []ledger.Decision{}
	}
	return out, nil
}
