package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Prepared statements. The statements a task's writes and reads run every
// time are parsed once per connection, at Open, instead of on every call
// (SQLite's parser ran on every statement, savepoints included: a fifth of
// the ledger's CPU in the bench's profile). What they do is unchanged: the
// same SQL, in the same transactions, under the same pragmas. A statement
// not in these lists runs as before, parsed when it runs.

// SQL the writes run, named once so that each call site and the list
// below are the same text.
const (
	sqlSavepoint   = "SAVEPOINT write"
	sqlRollbackTo  = "ROLLBACK TO write"
	sqlReleaseSave = "RELEASE write"

	sqlGetOp    = "SELECT " + opColumns + " FROM operations WHERE operation_id = ?"
	sqlInsertOp = "INSERT INTO operations (" + opColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlReclaim = `UPDATE operations SET state = ?, lease_owner = ?,
		lease_expires_at = ?, fence = ?, turn_id = ?, tool_call_id = ?, attempt_count = ?,
		external_id = '', result = NULL, error = '', facts = ?, updated_at = ?
		WHERE operation_id = ? AND fence = ?`
	sqlMarkRunning = `UPDATE operations SET state = ?,
		attempt_count = attempt_count + 1, facts = ?, updated_at = ?
		WHERE operation_id = ? AND fence = ?`
	sqlRenew = `UPDATE operations SET lease_expires_at = ?, updated_at = ?
		WHERE operation_id = ? AND fence = ?`
	sqlComplete = `UPDATE operations SET state = ?, external_id = ?,
		result = ?, error = ?, lease_expires_at = NULL, updated_at = ?
		WHERE operation_id = ? AND fence = ?`
	sqlReleaseOp = `UPDATE operations SET state = ?, lease_owner = '',
		lease_expires_at = NULL, updated_at = ?
		WHERE operation_id = ? AND fence = ?`

	sqlInsertItem    = "INSERT OR IGNORE INTO items (ref, data, size, created_at) VALUES (?, ?, ?, ?)"
	sqlInsertItemRef = "INSERT OR IGNORE INTO item_refs (ref, scope) VALUES (?, ?)"
	sqlGetItem       = "SELECT data FROM items WHERE ref = ?"

	sqlInsertTurn = "INSERT OR IGNORE INTO turns (turn_id, output, created_at, scope) VALUES (?, ?, ?, ?)"
	sqlGetTurn    = "SELECT output FROM turns WHERE turn_id = ?"
	sqlUpsertTask = `INSERT INTO tasks (scope, namespace, workflow_id, task_id, run_id, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (scope) DO UPDATE SET run_id = excluded.run_id, updated_at = excluded.updated_at`

	sqlInsertDecision = "INSERT OR IGNORE INTO decisions (" + decisionColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	sqlGetDecision    = "SELECT " + decisionColumns + " FROM decisions WHERE operation_id = ?"
)

// writerStatements are prepared on the writer at Open. They must be then:
// the writer has one connection, which a transaction holds while its
// writes run, so none could be prepared on it from inside one.
var writerStatements = []string{sqlSavepoint, sqlRollbackTo, sqlReleaseSave,
	sqlGetOp, sqlInsertOp, sqlReclaim, sqlMarkRunning, sqlRenew, sqlComplete, sqlReleaseOp,
	sqlInsertItem, sqlInsertItemRef, sqlInsertTurn, sqlGetTurn, sqlUpsertTask, sqlInsertDecision, sqlGetDecision}

// readerStatements are prepared on the readers at Open; database/sql
// prepares each again on every reader connection it opens later.
var readerStatements = []string{sqlGetOp, sqlGetItem, sqlGetTurn}

// prepared are one database's prepared statements, by their SQL.
type prepared map[string]*sql.Stmt

// prepare prepares queries on db.
func prepare(ctx context.Context, db *sql.DB, queries []string) (prepared, error) {
	p := prepared{}
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return p, fmt.Errorf("prepare %q: %w", q, err)
		}
		p[q] = st
	}
	return p, nil
}

func (p prepared) close() error {
	var errs []error
	for _, st := range p {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// exec runs query in tx, through its prepared statement if it has one.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.ws[query]; st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// queryRowTx reads one row in tx, through query's prepared statement if it
// has one.
func (s *Store) queryRowTx(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	if st := s.ws[query]; st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, query, args...)
}

// queryRow reads one row on a reader connection, through query's prepared
// statement if it has one.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := s.rs[query]; st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.r.QueryRowContext(ctx, query, args...)
}
