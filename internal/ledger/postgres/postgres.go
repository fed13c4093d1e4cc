// Package postgres is the ledger.Store for a pool of workers on several
// machines: one PostgreSQL database, reached through a pgxpool connection
// pool (github.com/jackc/pgx/v5).
//
// Guarantees, in addition to those of package ledger:
//   - A claim of a new operation is one INSERT … ON CONFLICT DO NOTHING: of
//     concurrent claimers, in this process or on other machines, exactly one
//     inserts the row. Every other claim and every write after a claim is one
//     transaction that locks the operation's row (SELECT … FOR UPDATE) before
//     deciding, so no decision is based on a row that changes before commit.
//     The rules themselves are package ledger's, shared with package sqlite.
//   - Open creates or upgrades the schema under a transaction-scoped advisory
//     lock, so workers opening the same database at once are safe, and it
//     refuses a database whose schema is newer than this binary's.
//   - Every lease decision and every timestamp is on one clock, the
//     database's (issue 14, item 7): the workers of a pool run on several
//     machines whose clocks may disagree by minutes, and a worker that
//     decided by its own clock would take another's lease early or keep its
//     own late. A write reads clock_timestamp() in its transaction after it
//     has locked the row (in the same round trip as the row), hands it to
//     package ledger's rules, and stamps the row with it; a new claim and
//     the items and turns are stamped by the database in the INSERT itself.
//     No worker's clock is read. Times are timestamptz, which keeps
//     microseconds, so what a call returns equals what a later read
//     returns.
//   - Operation ids sort bytewise (COLLATE "C"), as in SQLite, whatever the
//     database's collation.
//   - GetItem verifies that the bytes it returns hash to the reference asked
//     for.
//   - No error this package returns contains the DSN's password.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/capstanhq/capstan/internal/ledger"
)

// defaultConnectTimeout bounds each connection attempt when the DSN sets no
// connect_timeout, so that a worker facing an unreachable server says so
// instead of hanging.
const defaultConnectTimeout = 10 * time.Second

// Options configures a Store. The zero value is ready to use. It has no
// clock: the store reads the database's.
type Options struct {
	// Logger receives claim decisions (debug) and rejected stale-fence
	// writes (warn). Defaults to slog.Default().
	Logger *slog.Logger
	// Sealer, when not nil, encrypts the items the store writes and
	// decrypts those it reads (ledger.SealItem); nil stores them plain.
	Sealer ledger.Sealer
}

// Store is a ledger.Store backed by one PostgreSQL database. It is safe for
// concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	server string // host:port/database, for messages
	log    *slog.Logger
	// testNow, set only by the package's tests (SetDatabaseClock), stands
	// in for the database's clock; nil in every worker.
	testNow func() time.Time
	closed  sync.Once
	sealer  ledger.Sealer // Options.Sealer
}

var _ ledger.Store = (*Store)(nil)

// Open connects to the database dsn names (a postgres:// or postgresql://
// URL, or libpq keyword=value settings, as pgx accepts them, pool_max_conns
// included) and creates or upgrades the ledger's schema there. Errors name
// the server, never the password.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("ledger/postgres: %w", parseError(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	s := &Store{server: serverName(cfg.ConnConfig), log: opts.Logger, sealer: opts.Sealer}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledger/postgres: open %s: %w", s.server, err)
	}
	if err := migrate(ctx, s.pool); err != nil {
		s.pool.Close()
		var ce *pgconn.ConnectError
		if errors.As(err, &ce) {
			return nil, connectError(cfg.ConnConfig, ce)
		}
		return nil, fmt.Errorf("ledger/postgres: open %s: create schema: %w", s.server, err)
	}
	s.log.DebugContext(ctx, "ledger opened", "server", s.server)
	return s, nil
}

// Close closes the connection pool, waiting for connections in use to be
// returned. It is safe to call more than once.
func (s *Store) Close() error {
	s.closed.Do(s.pool.Close)
	return nil
}

// serverName is host:port/database of cfg, the first host of several.
func serverName(cfg *pgx.ConnConfig) string {
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) + "/" + cfg.Database
}

// parseError is err without the connection string pgx puts in front of its
// parse errors: callers name the DSN themselves, redacted their own way.
func parseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	// pgx's prefix is "cannot parse `<connection string, password masked>`: ".
	prefix := pgconn.NewParseConfigError(pe.ConnString, "", nil).Error()
	if msg, ok := strings.CutPrefix(err.Error(), prefix); ok {
		return fmt.Errorf("cannot parse the DSN: %s", msg)
	}
	return errors.New("cannot parse the DSN")
}

// connectError turns pgx's multi-line connect error into one sentence that
// names every server tried, the user and the database, and the reason the
// last attempt gave.
func connectError(cfg *pgx.ConnConfig, ce *pgconn.ConnectError) error {
	servers := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		if s := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); s != servers[len(servers)-1] {
			servers = append(servers, s)
		}
	}
	reason := "no reason given"
	if inner := ce.Unwrap(); inner != nil {
		lines := strings.Split(strings.TrimSpace(inner.Error()), "\n")
		reason = strings.TrimSpace(lines[len(lines)-1])
		// Each attempt starts with "host:port (host): "; the servers are
		// named already.
		if i := strings.Index(reason, "): "); i >= 0 && strings.Contains(reason[:i], " (") {
			reason = reason[i+len("): "):]
		}
	}
	return fmt.Errorf("ledger/postgres: cannot connect to PostgreSQL at %s as user %q, database %q: %s",
		strings.Join(servers, ", "), cfg.User, cfg.Database, reason)
}

// schemaVersion is the newest schema this binary knows: len(migrations).
var schemaVersion = len(migrations)

// migrations[i] brings the schema from version i to i+1. A released
// migration is never edited; a change to the schema is a new entry.
var migrations = []string{
	`CREATE TABLE operations (
		operation_id     text COLLATE "C" NOT NULL PRIMARY KEY,
		tenant           text        NOT NULL DEFAULT '',
		task_id          text        NOT NULL DEFAULT '',
		turn_id          text        NOT NULL DEFAULT '',
		tool_call_id     text        NOT NULL DEFAULT '',
		kind             text        NOT NULL DEFAULT '',
		business_key     text        NOT NULL DEFAULT '',
		request_hash     text        NOT NULL DEFAULT '',
		state            text        NOT NULL,
		lease_owner      text        NOT NULL DEFAULT '',
		lease_expires_at timestamptz,          -- NULL when no lease
		fence            bigint      NOT NULL,
		attempt_count    integer     NOT NULL DEFAULT 0,
		external_id      text        NOT NULL DEFAULT '',
		result           bytea,
		error            text        NOT NULL DEFAULT '',
		created_at       timestamptz NOT NULL,
		updated_at       timestamptz NOT NULL
	);
	CREATE INDEX operations_task_id ON operations (task_id, created_at, operation_id);
	CREATE TABLE items (
		ref        text COLLATE "C" NOT NULL PRIMARY KEY, -- "sha256:<hex>"
		data       bytea       NOT NULL,
		size       integer     NOT NULL,
		created_at timestamptz NOT NULL
	);`,
	`CREATE TABLE turns (
		turn_id    text COLLATE "C" NOT NULL PRIMARY KEY,
		output     bytea       NOT NULL,
		created_at timestamptz NOT NULL
	);`,
	// What an attempt recorded before sending (ledger.Operation.Facts).
	`ALTER TABLE operations ADD COLUMN facts bytea;`,
	// The chains of retention (ledger.Scope, starter gc): the turns'
	// scope, one row per chain, and who refers to each item. Items stored
	// before belong to tasks without a scope ('') and are never deleted.
	`ALTER TABLE turns ADD COLUMN scope text COLLATE "C" NOT NULL DEFAULT '';
	CREATE INDEX turns_scope ON turns (scope);
	CREATE TABLE tasks (
		scope       text COLLATE "C" NOT NULL PRIMARY KEY,
		namespace   text        NOT NULL,
		workflow_id text        NOT NULL,
		task_id     text        NOT NULL,
		run_id      text        NOT NULL,
		created_at  timestamptz NOT NULL,
		updated_at  timestamptz NOT NULL
	);
	CREATE INDEX tasks_updated_at ON tasks (updated_at);
	CREATE TABLE item_refs (
		ref   text COLLATE "C" NOT NULL,
		scope text COLLATE "C" NOT NULL,
		PRIMARY KEY (ref, scope)
	);
	CREATE INDEX item_refs_scope ON item_refs (scope);
	INSERT INTO item_refs (ref, scope) SELECT ref, '' FROM items;`,
	// The policy's decision on each operation (ledger.Decision).
	`CREATE TABLE decisions (
		operation_id text COLLATE "C" NOT NULL PRIMARY KEY,
		tenant       text        NOT NULL DEFAULT '',
		task_id      text        NOT NULL DEFAULT '',
		tool         text        NOT NULL DEFAULT '',
		effect       text        NOT NULL,
		rule         text        NOT NULL,
		reason       text        NOT NULL DEFAULT '',
		refused      boolean     NOT NULL,
		created_at   timestamptz NOT NULL
	);
	CREATE INDEX decisions_task_id ON decisions (task_id, created_at, operation_id);`,
	// The layer of the policy that made each decision (ledger.Decision.Layer).
	`ALTER TABLE decisions ADD COLUMN layer text NOT NULL DEFAULT '';`,
	// The Temporal retention asks (ledger.Served): one row at most.
	`CREATE TABLE served (
		id         integer     NOT NULL PRIMARY KEY CHECK (id = 1),
		cluster_id text        NOT NULL,
		namespace  text        NOT NULL,
		adopted_at timestamptz NOT NULL
	);`,
}

// migrationLock is the first key of the advisory lock that serializes the
// schema changes of one ledger ("capn" in ASCII); the second is a hash of
// the schema the ledger lives in.
const migrationLock int32 = 0x6361706e

// migrate brings the schema to schemaVersion in one transaction, in the
// first schema of the connection's search_path. Workers opening the ledger at
// once queue on the advisory lock; each later one finds the schema current
// and changes nothing.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))", migrationLock); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS ledger_schema_version (
			version    integer     NOT NULL PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var v int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM ledger_schema_version").Scan(&v); err != nil {
			return fmt.Errorf("read the schema version: %w", err)
		}
		if v > schemaVersion {
			return fmt.Errorf("schema version %d is newer than this binary's %d", v, schemaVersion)
		}
		for ; v < schemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO ledger_schema_version (version) VALUES ($1)", v+1); err != nil {
				return fmt.Errorf("record version %d: %w", v+1, err)
			}
		}
		return nil
	})
}

// dbNow is the SQL for the database's current time, its argument number n
// bound to s.nowArg(): clock_timestamp(), the time when the statement reads
// it — not now(), which stays at the transaction's start and so falls
// behind while a transaction waits for a row lock.
func dbNow(n int) string { return fmt.Sprintf("coalesce($%d::timestamptz, clock_timestamp())", n) }

// nowArg is the argument of dbNow: NULL, so that the database reads its own
// clock, except under a test's stand-in clock, whose time it is (UTC, whole
// microseconds, as timestamptz keeps it).
func (s *Store) nowArg() any {
	if s.testNow == nil {
		return nil
	}
	return s.testNow().UTC().Truncate(time.Microsecond)
}
