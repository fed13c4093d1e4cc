package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// upsertChain records, in the transaction of a turn commit, that sc's chain
// wrote now: its row in the tasks table, created on its first commit and
// brought up to the run that committed on every later one. Nothing for a
// context without a scope.
func (s *Store) upsertChain(ctx context.Context, tx *sql.Tx, sc ledger.Scope, now time.Time) error {
	if sc.Token == "" {
		return nil
	}
	_, err := s.exec(ctx, tx, sqlUpsertTask, sc.Token, sc.Namespace, sc.WorkflowID, sc.TaskID, sc.RunID, toNanos(now), toNanos(now))
	if err != nil {
		return fmt.Errorf("record chain %s: %w", sc.Token, err)
	}
	return nil
}

// Chains implements ledger.Retention.
func (s *Store) Chains(ctx context.Context, before time.Time) ([]ledger.Chain, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT scope, namespace, workflow_id, task_id, run_id, created_at, updated_at
		FROM tasks WHERE updated_at < ? ORDER BY updated_at, scope`, before.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: list chains: %w", err)
	}
	defer rows.Close()
	var out []ledger.Chain
	for rows.Next() {
		var c ledger.Chain
		var created, updated sql.NullInt64
		if err := rows.Scan(&c.Scope, &c.Namespace, &c.WorkflowID, &c.TaskID, &c.RunID, &created, &updated); err != nil {
			return nil, fmt.Errorf("ledger/sqlite: list chains: %w", err)
		}
		c.CreatedAt, c.UpdatedAt = fromNanos(created), fromNanos(updated)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: list chains: %w", err)
	}
	return out, nil
}

// errDryRun undoes a dry run's deletions.
var errDryRun = errors.New("dry run")

// RemoveChain implements ledger.Retention in one write transaction: the
// database's one writer, so no item writer can refer to an item between
// the check that nobody else does and its deletion.
func (s *Store) RemoveChain(ctx context.Context, c ledger.Chain, dryRun bool) (ledger.Removed, error) {
	var r ledger.Removed
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		r = ledger.Removed{}
		ops := []any{c.TaskID, c.OperationMark()}
		scope := []any{c.Scope}
		steps := []struct {
			count, del string
			args       []any
			n          *int
		}{
			{`SELECT count(*), coalesce(sum(length(result)), 0) FROM operations WHERE task_id = ? AND instr(operation_id, ?) > 0`,
				`DELETE FROM operations WHERE task_id = ? AND instr(operation_id, ?) > 0`, ops, &r.Operations},
			{`SELECT count(*), 0 FROM decisions WHERE task_id = ? AND instr(operation_id, ?) > 0`,
				`DELETE FROM decisions WHERE task_id = ? AND instr(operation_id, ?) > 0`, ops, &r.Decisions},
			{`SELECT count(*), coalesce(sum(length(output)), 0) FROM turns WHERE scope = ?`,
				`DELETE FROM turns WHERE scope = ?`, scope, &r.Turns},
			{`SELECT count(*), coalesce(sum(size), 0) FROM items WHERE ref IN (SELECT ref FROM item_refs WHERE scope = ?1)
				AND NOT EXISTS (SELECT 1 FROM item_refs o WHERE o.ref = items.ref AND o.scope <> ?1)`,
				`DELETE FROM items WHERE ref IN (SELECT ref FROM item_refs WHERE scope = ?1)
				AND NOT EXISTS (SELECT 1 FROM item_refs o WHERE o.ref = items.ref AND o.scope <> ?1)`, scope, &r.Items},
			{`SELECT count(*), 0 FROM tasks WHERE scope = ?`, `DELETE FROM tasks WHERE scope = ?`, scope, &r.Tasks},
			{`SELECT count(*), 0 FROM item_refs WHERE scope = ?`, `DELETE FROM item_refs WHERE scope = ?`, scope, nil},
		}
		for _, st := range steps {
			var n int
			var bytes int64
			if err := tx.QueryRowContext(ctx, st.count, st.args...).Scan(&n, &bytes); err != nil {
				return err
			}
			if st.n != nil {
				*st.n, r.Bytes = n, r.Bytes+bytes
			}
			if _, err := tx.ExecContext(ctx, st.del, st.args...); err != nil {
				return err
			}
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return ledger.Removed{}, fmt.Errorf("ledger/sqlite: remove chain %s: %w", c.Scope, err)
	}
	return r, nil
}

// CountUnscoped implements ledger.Retention.
func (s *Store) CountUnscoped(ctx context.Context) (ledger.Unscoped, error) {
	var u ledger.Unscoped
	err := s.r.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM operations o WHERE NOT EXISTS (SELECT 1 FROM tasks t
			WHERE t.task_id = o.task_id AND instr(o.operation_id, ':' || t.task_id || ':' || t.scope || ':') > 0)),
		(SELECT count(*) FROM turns WHERE scope = '')`).Scan(&u.Operations, &u.Turns)
	if err != nil {
		return u, fmt.Errorf("ledger/sqlite: count rows without a scope: %w", err)
	}
	return u, nil
}

// Served implements ledger.Retention.
func (s *Store) Served(ctx context.Context) (ledger.Served, bool, error) {
	var sv ledger.Served
	var at sql.NullInt64
	err := s.r.QueryRowContext(ctx, "SELECT cluster_id, namespace, adopted_at FROM served WHERE id = 1").Scan(&sv.ClusterID, &sv.Namespace, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ledger.Served{}, false, nil
	case err != nil:
		return ledger.Served{}, false, unavailable(fmt.Errorf("ledger/sqlite: read the Temporal served: %w", err))
	}
	sv.AdoptedAt = fromNanos(at)
	return sv, true, nil
}

// AdoptServed implements ledger.Retention: the first row written stands.
func (s *Store) AdoptServed(ctx context.Context, sv ledger.Served) (ledger.Served, error) {
	if sv.ClusterID == "" || sv.Namespace == "" {
		return ledger.Served{}, fmt.Errorf("ledger/sqlite: adopt a Temporal without a cluster id or namespace (%+v)", sv)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO served (id, cluster_id, namespace, adopted_at) VALUES (1, ?, ?, ?)",
			sv.ClusterID, sv.Namespace, toNanos(s.now().UTC()))
		return err
	})
	if err != nil {
		return ledger.Served{}, unavailable(fmt.Errorf("ledger/sqlite: adopt the Temporal served: %w", err))
	}
	stored, ok, err := s.Served(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("ledger/sqlite: adopt the Temporal served: no row after the insert")
	}
	return stored, err
}
