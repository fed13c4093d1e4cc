// Package sqlite is the embedded ledger.Store: one SQLite file, opened with
// the pure-Go modernc.org/sqlite driver, shared by every worker process on a
// machine.
//
// Guarantees, in addition to those of package ledger:
//   - Every state change is one transaction begun with BEGIN IMMEDIATE, so it
//     reads and writes under the database's write lock: concurrent claimers,
//     in this process or in others sharing the file, are serialized, and a
//     claim decision can never be based on a row that changed before commit.
//   - Inside a process all writes go through a single connection; readers use
//     their own connections and, thanks to WAL, never block the writer.
//   - Stores sharing the file (worker processes, or several Stores of one
//     process) take an flock(2) on the file + "-writer" around each write
//     transaction where the system has flock, so a writer waiting for
//     another wakes when it commits instead of sleeping in SQLite's busy
//     handler (writerlock_unix.go). The lock orders writers; the database
//     lock and its busy timeout still guard the data.
//   - Concurrent writes share commits (group commit, groupcommit.go): each
//     runs in a savepoint of one transaction, and none returns before the
//     COMMIT that holds it; a write that fails is undone alone.
//   - Open returns only once journal_mode=WAL, busy_timeout=5000 ms,
//     synchronous=FULL and foreign_keys=ON are verified on a live
//     connection and the schema exists. A committed write survives a process
//     crash and a power loss: with synchronous=FULL every commit is synced,
//     because a running mark that rolled back would let a second claim send
//     the same effect again. Ledger writes are few, so the cost is small.
//   - All timestamps, including lease expiry checks, come from Options.Now and
//     are stored as UTC Unix nanoseconds. That clock is the ledger's: the
//     file lives on one machine, every worker process sharing it runs there
//     and reads the one clock of that machine, so no two of them can
//     disagree about a lease (issue 14, item 7). PostgreSQL, shared across
//     machines, reads its database's clock instead.
//   - GetItem verifies that the bytes it returns hash to the reference asked
//     for.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// schemaVersion is stored in PRAGMA user_version. Open refuses a database
// written by a newer schema. Version 2 added the turns table, version 3 the
// operations' facts column, version 4 the chains of retention: the turns'
// scope column, the tasks table and item ownership (item_refs), version 5
// the policy's decisions, version 6 the layer that made each decision,
// version 7 the Temporal the ledger serves.
const schemaVersion = 7

const busyTimeoutMillis = 5000

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; it stamps rows and decides whether a
	// lease is live. Defaults to time.Now, the clock of the machine the
	// file is on, which every worker sharing the file reads; tests inject
	// another.
	Now func() time.Time
	// Logger receives claim decisions (debug) and rejected stale-fence
	// writes (warn). Defaults to slog.Default().
	Logger *slog.Logger
	// Sealer, when not nil, encrypts the items the store writes and
	// decrypts those it reads (ledger.SealItem); nil stores them plain.
	Sealer ledger.Sealer

	// noWriterLock leaves the writers' lock (writerlock_unix.go) out, as
	// on systems without flock; tests set it to compare.
	noWriterLock bool
}

// Store is a ledger.Store backed by one SQLite file. It is safe for
// concurrent use.
type Store struct {
	path   string
	w      *sql.DB // exactly one connection; every write goes through it
	r      *sql.DB // read-only connections for Get, ListByTask and GetItem
	now    func() time.Time
	log    *slog.Logger
	closed sync.Once
	cerr   error

	wq *writeQueue // every write goes through it (group commit, groupcommit.go)
	wl *writerLock // held around each group's transaction; nil: none
	ws prepared    // the writer's prepared statements (prepared.go)
	rs prepared    // the readers' prepared statements

	sealer ledger.Sealer // Options.Sealer
}

var _ ledger.Store = (*Store)(nil)

// Open opens (creating if needed) the ledger database at path, creating its
// parent directories. Errors name the path.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("ledger/sqlite: open: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: open %q: %w", path, err)
	}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("ledger/sqlite: open %q: is a directory, want a database file", path)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: open %q: create parent directory: %w", path, err)
	}

	s := &Store{path: abs, now: opts.Now, log: opts.Logger, wq: newWriteQueue(), sealer: opts.Sealer}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}

	fail := func(what string, err error) (*Store, error) {
		s.Close()
		return nil, fmt.Errorf("ledger/sqlite: open %q: %s: %w", path, what, err)
	}

	if !opts.noWriterLock {
		if s.wl, err = openWriterLock(abs); err != nil {
			return fail("open the writers' lock", err)
		}
	}

	// The writer is opened and checked first: it is the connection that
	// switches a new file to WAL and creates the schema.
	if s.w, err = sql.Open("sqlite", dsn(abs, false)); err != nil {
		return fail("open writer", err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := verifyPragmas(ctx, s.w); err != nil {
		return fail("configure writer connection", err)
	}
	if err := migrate(ctx, s.w); err != nil {
		return fail("create schema", err)
	}
	if s.ws, err = prepare(ctx, s.w, writerStatements); err != nil {
		return fail("prepare the writer's statements", err)
	}

	if s.r, err = sql.Open("sqlite", dsn(abs, true)); err != nil {
		return fail("open readers", err)
	}
	s.r.SetMaxOpenConns(4)
	s.r.SetMaxIdleConns(4)
	if err := verifyPragmas(ctx, s.r); err != nil {
		return fail("configure reader connection", err)
	}
	if s.rs, err = prepare(ctx, s.r, readerStatements); err != nil {
		return fail("prepare the readers' statements", err)
	}
	s.log.DebugContext(ctx, "ledger opened", "path", abs)
	return s, nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	s.closed.Do(func() {
		errs := []error{s.rs.close(), s.ws.close(), s.wl.close()}
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		if s.w != nil {
			errs = append(errs, s.w.Close())
		}
		if err := errors.Join(errs...); err != nil {
			s.cerr = fmt.Errorf("ledger/sqlite: close %q: %w", s.path, err)
		}
	})
	return s.cerr
}

// dsn builds a modernc.org/sqlite URI DSN. The driver runs the _pragma list on
// every new connection, busy_timeout first; _txlock=immediate makes every
// read-write BeginTx issue BEGIN IMMEDIATE.
func dsn(abs string, readOnly bool) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows drive letter: file:/C:/...
	}
	// Characters that end or escape the path part of a URI.
	p = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	q := []string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeoutMillis),
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(FULL)",
		"_pragma=foreign_keys(1)",
	}
	if readOnly {
		q = append(q, "_pragma=query_only(1)")
	} else {
		q = append(q, "_txlock=immediate")
	}
	return "file:" + p + "?" + strings.Join(q, "&")
}

// openConn opens one connection of db. Switching a new file to WAL takes an
// exclusive lock that SQLite does not wait for through busy_timeout, so
// workers opening one fresh ledger at once can see SQLITE_BUSY here: that
// is retried, with a short jittered pause, for up to busyTimeoutMillis.
func openConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	deadline := time.Now().Add(busyTimeoutMillis * time.Millisecond)
	for {
		conn, err := db.Conn(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return conn, err
		}
		pause := time.NewTimer(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		select {
		case <-ctx.Done():
			pause.Stop()
			return nil, ctx.Err()
		case <-pause.C:
		}
	}
}

func isBusy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// verifyPragmas checks on one live connection of db that the DSN pragmas took
// effect; the driver applies the same list to every connection it opens.
func verifyPragmas(ctx context.Context, db *sql.DB) error {
	conn, err := openConn(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal (is the file on a filesystem without shared memory support?)", mode)
	}
	want := []struct {
		pragma string
		value  int64
	}{
		{"busy_timeout", busyTimeoutMillis},
		{"synchronous", 2}, // FULL
		{"foreign_keys", 1},
	}
	for _, w := range want {
		var got int64
		if err := conn.QueryRowContext(ctx, "PRAGMA "+w.pragma).Scan(&got); err != nil {
			return fmt.Errorf("read %s: %w", w.pragma, err)
		}
		if got != w.value {
			return fmt.Errorf("%s is %d, want %d", w.pragma, got, w.value)
		}
	}
	return nil
}

const schema = `
CREATE TABLE IF NOT EXISTS operations (
	operation_id     TEXT    NOT NULL PRIMARY KEY,
	tenant           TEXT    NOT NULL DEFAULT '',
	task_id          TEXT    NOT NULL DEFAULT '',
	turn_id          TEXT    NOT NULL DEFAULT '',
	tool_call_id     TEXT    NOT NULL DEFAULT '',
	kind             TEXT    NOT NULL DEFAULT '',
	business_key     TEXT    NOT NULL DEFAULT '',
	request_hash     TEXT    NOT NULL DEFAULT '',
	state            TEXT    NOT NULL,
	lease_owner      TEXT    NOT NULL DEFAULT '',
	lease_expires_at INTEGER,          -- UTC Unix nanoseconds; NULL when no lease
	fence            INTEGER NOT NULL,
	attempt_count    INTEGER NOT NULL DEFAULT 0,
	external_id      TEXT    NOT NULL DEFAULT '',
	result           BLOB,
	error            TEXT    NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL, -- UTC Unix nanoseconds
	updated_at       INTEGER NOT NULL, -- UTC Unix nanoseconds
	facts            BLOB              -- since schema version 3; see addFactsColumn
);
CREATE INDEX IF NOT EXISTS operations_task_id ON operations (task_id, created_at, operation_id);
CREATE TABLE IF NOT EXISTS items (
	ref        TEXT    NOT NULL PRIMARY KEY, -- "sha256:<hex>"
	data       BLOB    NOT NULL,
	size       INTEGER NOT NULL,
	created_at INTEGER NOT NULL              -- UTC Unix nanoseconds
);
CREATE TABLE IF NOT EXISTS turns (           -- since schema version 2
	turn_id    TEXT    NOT NULL PRIMARY KEY,
	output     BLOB    NOT NULL,
	created_at INTEGER NOT NULL,             -- UTC Unix nanoseconds
	scope      TEXT    NOT NULL DEFAULT ''   -- since schema version 4; see addScopeColumn
);
CREATE TABLE IF NOT EXISTS tasks (           -- since schema version 4: one row per chain
	scope       TEXT    NOT NULL PRIMARY KEY, -- ledger.Scope.Token
	namespace   TEXT    NOT NULL,
	workflow_id TEXT    NOT NULL,
	task_id     TEXT    NOT NULL,
	run_id      TEXT    NOT NULL,            -- the last run that committed a turn
	created_at  INTEGER NOT NULL,            -- UTC Unix nanoseconds
	updated_at  INTEGER NOT NULL             -- UTC Unix nanoseconds
);
CREATE INDEX IF NOT EXISTS tasks_updated_at ON tasks (updated_at);
CREATE TABLE IF NOT EXISTS item_refs (       -- since schema version 4: who refers to an item
	ref   TEXT NOT NULL,
	scope TEXT NOT NULL,                     -- '' for tasks without a scope, and every item older than version 4
	PRIMARY KEY (ref, scope)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS item_refs_scope ON item_refs (scope);
CREATE TABLE IF NOT EXISTS decisions (       -- since schema version 5: the policy's decision per operation
	operation_id TEXT    NOT NULL PRIMARY KEY,
	tenant       TEXT    NOT NULL DEFAULT '',
	task_id      TEXT    NOT NULL DEFAULT '',
	tool         TEXT    NOT NULL DEFAULT '',
	effect       TEXT    NOT NULL,
	rule         TEXT    NOT NULL,
	reason       TEXT    NOT NULL DEFAULT '',
	refused      INTEGER NOT NULL,           -- 0 or 1
	created_at   INTEGER NOT NULL,           -- UTC Unix nanoseconds
	layer        TEXT    NOT NULL DEFAULT '' -- since schema version 6; see addLayerColumn
);
CREATE INDEX IF NOT EXISTS decisions_task_id ON decisions (task_id, created_at, operation_id);
CREATE TABLE IF NOT EXISTS served (          -- since schema version 7: the Temporal retention asks (ledger.Served)
	id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1), -- one row at most
	cluster_id TEXT    NOT NULL,
	namespace  TEXT    NOT NULL,
	adopted_at INTEGER NOT NULL              -- UTC Unix nanoseconds
);
`

// migrate creates the schema if missing and upgrades an older one. It is
// idempotent and refuses a database from a newer schema version.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read user_version: %w", err)
	}
	if v > schemaVersion {
		return fmt.Errorf("schema version %d is newer than this binary's %d", v, schemaVersion)
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return err
	}
	if err := addFactsColumn(ctx, tx); err != nil {
		return err
	}
	if err := addScopeColumn(ctx, tx); err != nil {
		return err
	}
	if err := addLayerColumn(ctx, tx); err != nil {
		return err
	}
	if v > 0 && v < 4 {
		// Items stored before ownership was recorded belong to tasks
		// without a scope: pinned, never deleted by retention.
		if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO item_refs (ref, scope) SELECT ref, '' FROM items"); err != nil {
			return fmt.Errorf("pin the items of older tasks: %w", err)
		}
	}
	if v < schemaVersion {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return fmt.Errorf("set user_version: %w", err)
		}
	}
	return tx.Commit()
}

// addFactsColumn brings an operations table created before schema version 3
// up to it. CREATE TABLE IF NOT EXISTS leaves an existing table as it is,
// so the column is added when, and only when, the table lacks it: the check
// makes the upgrade idempotent, whatever user_version says.
func addFactsColumn(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx,
		"SELECT count(*) FROM pragma_table_info('operations') WHERE name = 'facts'").Scan(&n); err != nil {
		return fmt.Errorf("look for the facts column: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "ALTER TABLE operations ADD COLUMN facts BLOB"); err != nil {
		return fmt.Errorf("add the facts column: %w", err)
	}
	return nil
}

// addLayerColumn brings a decisions table created before schema version 6
// up to it, as addFactsColumn does the operations table.
func addLayerColumn(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx,
		"SELECT count(*) FROM pragma_table_info('decisions') WHERE name = 'layer'").Scan(&n); err != nil {
		return fmt.Errorf("look for the decisions' layer column: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "ALTER TABLE decisions ADD COLUMN layer TEXT NOT NULL DEFAULT ''"); err != nil {
		return fmt.Errorf("add the decisions' layer column: %w", err)
	}
	return nil
}

// addScopeColumn brings a turns table created before schema version 4 up to
// it, as addFactsColumn does the operations table.
func addScopeColumn(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx,
		"SELECT count(*) FROM pragma_table_info('turns') WHERE name = 'scope'").Scan(&n); err != nil {
		return fmt.Errorf("look for the turns' scope column: %w", err)
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, "ALTER TABLE turns ADD COLUMN scope TEXT NOT NULL DEFAULT ''"); err != nil {
			return fmt.Errorf("add the turns' scope column: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, "CREATE INDEX IF NOT EXISTS turns_scope ON turns (scope)"); err != nil {
		return fmt.Errorf("index the turns' scope: %w", err)
	}
	return nil
}

// toNanos and fromNanos convert between time.Time and the stored form. The
// zero time is stored as NULL.
func toNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
