package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan/internal/ledger"
)

// queueChain queues on b, a turn commit's batch, the upsert of sc's chain
// in the tasks table: created on its first commit, brought up to the run
// that committed on every later one. Nothing for a context without a
// scope.
func queueChain(b *pgx.Batch, sc ledger.Scope, now any) {
	if sc.Token == "" {
		return
	}
	b.Queue(`INSERT INTO tasks (scope, namespace, workflow_id, task_id, run_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, `+dbNow(6)+`, `+dbNow(6)+`)
		ON CONFLICT (scope) DO UPDATE SET run_id = excluded.run_id, updated_at = excluded.updated_at`,
		sc.Token, sc.Namespace, sc.WorkflowID, sc.TaskID, sc.RunID, now)
}

// Chains implements ledger.Retention.
func (s *Store) Chains(ctx context.Context, before time.Time) ([]ledger.Chain, error) {
	rows, err := s.pool.Query(ctx, `SELECT scope, namespace, workflow_id, task_id, run_id, created_at, updated_at
		FROM tasks WHERE updated_at < $1 ORDER BY updated_at, scope`, before)
	if err != nil {
		return nil, fmt.Errorf("ledger/postgres: list chains: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Chain, error) {
		var c ledger.Chain
		err := r.Scan(&c.Scope, &c.Namespace, &c.WorkflowID, &c.TaskID, &c.RunID, &c.CreatedAt, &c.UpdatedAt)
		c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger/postgres: list chains: %w", err)
	}
	return out, nil
}

// errDryRun rolls a dry run's deletions back.
var errDryRun = errors.New("dry run")

// RemoveChain implements ledger.Retention in one transaction that first
// takes the item lock exclusively, so no writer can make one of the items
// it deletes someone's again between its check and the deletion.
func (s *Store) RemoveChain(ctx context.Context, c ledger.Chain, dryRun bool) (ledger.Removed, error) {
	var r ledger.Removed
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r = ledger.Removed{}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))", itemLock); err != nil {
			return fmt.Errorf("take the item lock: %w", err)
		}
		steps := []struct {
			sql  string
			args []any
			n    *int
		}{
			{`WITH d AS (DELETE FROM operations WHERE task_id = $1 AND strpos(operation_id, $2) > 0 RETURNING result)
				SELECT count(*), coalesce(sum(length(result)), 0) FROM d`, []any{c.TaskID, c.OperationMark()}, &r.Operations},
			{`WITH d AS (DELETE FROM decisions WHERE task_id = $1 AND strpos(operation_id, $2) > 0 RETURNING 1)
				SELECT count(*), 0 FROM d`, []any{c.TaskID, c.OperationMark()}, &r.Decisions},
			{`WITH d AS (DELETE FROM turns WHERE scope = $1 RETURNING output)
				SELECT count(*), coalesce(sum(length(output)), 0) FROM d`, []any{c.Scope}, &r.Turns},
			{`WITH d AS (DELETE FROM items i WHERE ref IN (SELECT ref FROM item_refs WHERE scope = $1)
					AND NOT EXISTS (SELECT 1 FROM item_refs o WHERE o.ref = i.ref AND o.scope <> $1) RETURNING size)
				SELECT count(*), coalesce(sum(size), 0) FROM d`, []any{c.Scope}, &r.Items},
			{`WITH d AS (DELETE FROM tasks WHERE scope = $1 RETURNING 1) SELECT count(*), 0 FROM d`, []any{c.Scope}, &r.Tasks},
			{`WITH d AS (DELETE FROM item_refs WHERE scope = $1 RETURNING 1) SELECT count(*), 0 FROM d`, []any{c.Scope}, nil},
		}
		for _, st := range steps {
			var n int
			var bytes int64
			if err := tx.QueryRow(ctx, st.sql, st.args...).Scan(&n, &bytes); err != nil {
				return err
			}
			if st.n != nil {
				*st.n, r.Bytes = n, r.Bytes+bytes
			}
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return ledger.Removed{}, fmt.Errorf("ledger/postgres: remove chain %s: %w", c.Scope, err)
	}
	return r, nil
}

// CountUnscoped implements ledger.Retention.
func (s *Store) CountUnscoped(ctx context.Context) (ledger.Unscoped, error) {
	var u ledger.Unscoped
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM operations o WHERE NOT EXISTS (SELECT 1 FROM tasks t
			WHERE t.task_id = o.task_id AND strpos(o.operation_id, ':' || t.task_id || ':' || t.scope || ':') > 0)),
		(SELECT count(*) FROM turns WHERE scope = '')`).Scan(&u.Operations, &u.Turns)
	if err != nil {
		return u, fmt.Errorf("ledger/postgres: count rows without a scope: %w", err)
	}
	return u, nil
}

// Served implements ledger.Retention.
func (s *Store) Served(ctx context.Context) (ledger.Served, bool, error) {
	var sv ledger.Served
	err := s.pool.QueryRow(ctx, "SELECT cluster_id, namespace, adopted_at FROM served WHERE id = 1").Scan(&sv.ClusterID, &sv.Namespace, &sv.AdoptedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.Served{}, false, nil
	case err != nil:
		return ledger.Served{}, false, unavailable(fmt.Errorf("ledger/postgres: read the Temporal served: %w", err))
	}
	sv.AdoptedAt = sv.AdoptedAt.UTC()
	return sv, true, nil
}

// AdoptServed implements ledger.Retention: the first row written stands,
// and the statement returns whichever row that is.
func (s *Store) AdoptServed(ctx context.Context, sv ledger.Served) (ledger.Served, error) {
	if sv.ClusterID == "" || sv.Namespace == "" {
		return ledger.Served{}, fmt.Errorf("ledger/postgres: adopt a Temporal without a cluster id or namespace (%+v)", sv)
	}
	var stored ledger.Served
	err := s.pool.QueryRow(ctx, `INSERT INTO served (id, cluster_id, namespace, adopted_at) VALUES (1, $1, $2, `+dbNow(3)+`)
		ON CONFLICT (id) DO UPDATE SET id = served.id
		RETURNING cluster_id, namespace, adopted_at`, sv.ClusterID, sv.Namespace, s.nowArg()).Scan(&stored.ClusterID, &stored.Namespace, &stored.AdoptedAt)
	if err != nil {
		return ledger.Served{}, unavailable(fmt.Errorf("ledger/postgres: adopt the Temporal served: %w", err))
	}
	stored.AdoptedAt = stored.AdoptedAt.UTC()
	return stored, nil
}
