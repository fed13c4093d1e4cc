package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/ledger/ledgertest"
	"github.com/capstanhq/capstan/internal/ledger/postgres"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// open opens a store on dsn whose database clock is now (SetDatabaseClock),
// or the database's own when now is nil.
func open(t testing.TB, dsn string, now func() time.Time) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if now != nil {
		postgres.SetDatabaseClock(s, now)
	}
	return s
}

// rawDB connects to dsn with plain pgx to look at what the store left.
func rawDB(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestContract(t *testing.T) {
	t.Parallel()
	pgtest.AdminDSN(t) // skip (or fail, in CI) once, not in every subtest
	ledgertest.Run(t, func(t *testing.T, now func() time.Time) ledger.Store {
		return open(t, pgtest.NewLedger(t), now)
	})
}

// A ledger written before the one vocabulary holds the old state
// spellings; rewrite puts them into the table through a connection of its
// own, as an older release's worker would have.
func TestContractOldRows(t *testing.T) {
	t.Parallel()
	pgtest.AdminDSN(t)
	ledgertest.RunOldRows(t, func(t *testing.T, now func() time.Time) (ledger.Store, func(id, state string)) {
		dsn := pgtest.NewLedger(t)
		s := open(t, dsn, now)
		conn := rawDB(t, dsn)
		return s, func(id, state string) {
			if _, err := conn.Exec(context.Background(), `UPDATE operations SET state = $1 WHERE operation_id = $2`, state, id); err != nil {
				t.Fatalf("rewrite the state of %s: %v", id, err)
			}
		}
	})
}

// Several Stores on one database stand in for the workers of a pool, each
// with its own connection pool.
func TestContractShared(t *testing.T) {
	t.Parallel()
	pgtest.AdminDSN(t)
	ledgertest.RunShared(t, func(t *testing.T, now func() time.Time) func() (ledger.Store, error) {
		dsn := pgtest.NewLedger(t)
		return func() (ledger.Store, error) {
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{Logger: testLogger(t)})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			postgres.SetDatabaseClock(s, now)
			return s, nil
		}
	})
}

// Workers whose clocks are off the database's: each store is opened the
// way a worker opens its ledger (ledgerdsn, which takes the worker's clock)
// with a worker clock Skew ahead or behind, and the database's clock is the
// suite's (SetDatabaseClock). Leases and rows must follow the database.
func TestContractClocks(t *testing.T) {
	t.Parallel()
	pgtest.AdminDSN(t)
	ledgertest.RunClocks(t, func(t *testing.T, ledgerNow func() time.Time) func(func() time.Time) (ledger.Store, error) {
		dsn := pgtest.NewLedger(t)
		return func(workerNow func() time.Time) (ledger.Store, error) {
			s, err := ledgerdsn.Open(context.Background(), dsn, ledgerdsn.Options{Now: workerNow, Logger: testLogger(t)})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			postgres.SetDatabaseClock(s.(*postgres.Store), ledgerNow)
			return s, nil
		}
	})
}

// The same on the database's real clock, with no stand-in: three workers
// open one ledger as workerapp does, one with the right time, one whose
// clock is two minutes ahead and one two minutes behind. The one ahead
// does not take the first's live lease; the one behind does not keep an
// ended one live; rows carry the database's time.
func TestWorkerClockDoesNotDecideLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewLedger(t)
	openAt := func(skew time.Duration) ledger.Store {
		s, err := ledgerdsn.Open(ctx, dsn, ledgerdsn.Options{Now: func() time.Time { return time.Now().Add(skew) }, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	right, ahead, behind := openAt(0), openAt(ledgertest.Skew), openAt(-ledgertest.Skew)
	raw := rawDB(t, dsn)
	dbNow := func() time.Time {
		var now time.Time
		if err := raw.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	claimRunning := func(s ledger.Store, id, owner string, lease time.Duration) ledger.Operation {
		res, err := s.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: id, TaskID: "task-1", RequestHash: "h"},
			Owner: owner, Lease: lease, Running: true})
		if err != nil || res.Status != ledger.Claimed {
			t.Fatalf("Claim(%s) by %s: %q, %v", id, owner, res.Status, err)
		}
		return res.Op
	}

	from := dbNow()
	live := claimRunning(ahead, "op-live", "worker-ahead#1", time.Minute)
	to := dbNow()
	if live.CreatedAt.Before(from) || live.CreatedAt.After(to) || !live.LeaseExpiresAt.Equal(live.CreatedAt.Add(time.Minute)) {
		t.Fatalf("a claim by the worker %v ahead: created %v, lease until %v; want created between %v and %v by the database's clock, the lease a minute later",
			ledgertest.Skew, live.CreatedAt, live.LeaseExpiresAt, from, to)
	}
	live = claimRunning(right, "op-live-2", "worker-right#1", time.Minute)
	if res, err := ahead.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: live.ID, TaskID: "task-1", RequestHash: "h"},
		Owner: "worker-ahead#2", Lease: time.Minute}); err != nil || res.Status != ledger.InProgress {
		t.Fatalf("Claim of a running operation under a live one-minute lease by the worker %v ahead: %q, %v; want %q",
			ledgertest.Skew, res.Status, err, ledger.InProgress)
	}
	if _, err := ahead.TakeForReconcile(ctx, live.ID, "reconciler-ahead#1", time.Minute); !errors.Is(err, ledger.ErrLeaseHeld) {
		t.Fatalf("TakeForReconcile under a live one-minute lease by the worker %v ahead: %v, want ErrLeaseHeld", ledgertest.Skew, err)
	}

	ended := claimRunning(right, "op-ended", "worker-right#1", time.Millisecond)
	for !dbNow().After(ended.LeaseExpiresAt) { // one round trip each: the database's clock passes the lease's end
	}
	if res, err := behind.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: ended.ID, TaskID: "task-1", RequestHash: "h"},
		Owner: "worker-behind#1", Lease: time.Minute}); err != nil || res.Status != ledger.MustReconcile {
		t.Fatalf("Claim of a running operation whose lease ended by the database's clock, by the worker %v behind: %q, %v; want %q",
			ledgertest.Skew, res.Status, err, ledger.MustReconcile)
	}
}

// BenchmarkClaim reports claims/s with 1 and 8 concurrent claimers:
//
//	go test -run '^$' -bench Claim ./internal/ledger/postgres/
func BenchmarkClaim(b *testing.B) {
	pgtest.AdminDSN(b)
	ledgertest.BenchmarkClaim(b, func(b *testing.B) ledger.Store {
		s, err := postgres.Open(context.Background(), pgtest.NewLedger(b), postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// BenchmarkDecidedClaim compares a policy decision recorded alone before
// its claim with one carried by the claim:
//
//	go test -run '^$' -bench DecidedClaim ./internal/ledger/postgres/
func BenchmarkDecidedClaim(b *testing.B) {
	pgtest.AdminDSN(b)
	ledgertest.BenchmarkDecidedClaim(b, func(b *testing.B) ledger.Store {
		s, err := postgres.Open(context.Background(), pgtest.NewLedger(b), postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// BenchmarkTask runs the ledger calls of one bench demo task per
// iteration:
//
//	go test -run '^$' -bench Task -cpuprofile cpu.out ./internal/ledger/postgres/
func BenchmarkTask(b *testing.B) {
	pgtest.AdminDSN(b)
	ledgertest.BenchmarkTask(b, func(b *testing.B) ledger.Store {
		s, err := postgres.Open(context.Background(), pgtest.NewLedger(b), postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// expectOpenError opens dsn and wants one line of error that contains each
// of want and not the password.
func expectOpenError(t *testing.T, dsn, password string, want ...string) {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("Open succeeded, want an error containing %q", want)
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
	if strings.Contains(msg, password) {
		t.Errorf("error %q leaks the password", msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans several lines, want one sentence", msg)
	}
}

// These need no server.
func TestOpenErrorsWithoutAServer(t *testing.T) {
	t.Parallel()
	t.Run("unreachable", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		expectOpenError(t, "postgres://capstan:s3cret@"+addr+"/ledger", "s3cret",
			"cannot connect to PostgreSQL at "+addr, `user "capstan"`, `database "ledger"`, "connection refused")
	})
	t.Run("bad port", func(t *testing.T) {
		expectOpenError(t, "postgres://capstan:s3cret@db:badport/ledger", "s3cret", "cannot parse the DSN", "invalid port")
	})
	t.Run("bad setting", func(t *testing.T) {
		expectOpenError(t, "postgresql://capstan:s3cret@db/ledger?sslmode=sometimes", "s3cret", "cannot parse the DSN", "sslmode is invalid")
	})
}

func TestOpenErrorsFromTheServer(t *testing.T) {
	t.Parallel()
	admin := pgtest.AdminDSN(t)
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("%s is not a postgres:// URL; this test edits its parts", pgtest.EnvDSN)
	}
	wrong := *u
	wrong.User = url.UserPassword(u.User.Username(), "not-the-password")
	expectOpenError(t, wrong.String(), "not-the-password", "cannot connect to PostgreSQL at "+u.Host, "password authentication failed")

	noDB := *u
	noDB.Path = "/capstan_no_such_database"
	pw, ok := u.User.Password()
	if !ok || strings.Contains(u.Host+u.User.Username()+noDB.Path, pw) {
		pw = "\x00" // nothing to look for that a correct message could not contain
	}
	expectOpenError(t, noDB.String(), pw, `database "capstan_no_such_database" does not exist`)
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewLedger(t)
	open(t, dsn, nil).Close()
	if _, err := rawDB(t, dsn).Exec(context.Background(), "INSERT INTO ledger_schema_version (version) VALUES (99)"); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(context.Background(), dsn, postgres.Options{}); err == nil {
		s.Close()
		t.Fatal("Open of a newer schema succeeded")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("error %q, want it to say the schema is newer", err)
	}
}

// Opening an existing database again applies no migration twice.
func TestSchemaIsMigratedOnce(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewLedger(t)
	for range 3 {
		open(t, dsn, nil).Close()
	}
	var n, v int
	if err := rawDB(t, dsn).QueryRow(context.Background(),
		"SELECT count(*), max(version) FROM ledger_schema_version").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != postgres.SchemaVersion || v != postgres.SchemaVersion {
		t.Fatalf("ledger_schema_version has %d rows up to version %d, want one row per migration up to %d", n, v, postgres.SchemaVersion)
	}
}

// PostgreSQL keeps microseconds: a clock with nanoseconds (here the
// stand-in for the database's) is truncated
// before anything is written, so Claim returns what Get reads back and the
// lease ends where the stored row says.
func TestTimestampsAreWholeMicroseconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ledgertest.NewClock(ledgertest.Epoch.Add(789 * time.Nanosecond))
	s := open(t, pgtest.NewLedger(t), clock.Now)
	op := ledger.Operation{ID: "op-ns", TaskID: "task-1", RequestHash: "h"}
	res, err := s.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: "w/1", Lease: time.Minute + 321*time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Op.CreatedAt.Equal(ledgertest.Epoch) || !got.CreatedAt.Equal(ledgertest.Epoch) {
		t.Errorf("CreatedAt returned %v, stored %v; want %v", res.Op.CreatedAt, got.CreatedAt, ledgertest.Epoch)
	}
	if want := ledgertest.Epoch.Add(time.Minute); !res.Op.LeaseExpiresAt.Equal(want) || !got.LeaseExpiresAt.Equal(want) {
		t.Errorf("LeaseExpiresAt returned %v, stored %v; want %v", res.Op.LeaseExpiresAt, got.LeaseExpiresAt, want)
	}
}

func TestItemsStoredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewLedger(t)
	s := open(t, dsn, nil)
	for range 3 {
		if _, err := s.PutItem(ctx, []byte("same")); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := rawDB(t, dsn).QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d item rows, want 1", n)
	}
}

func TestCorruptItemIsNotReturned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewLedger(t)
	s := open(t, dsn, nil)
	ref, err := s.PutItem(ctx, []byte("original"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, dsn).Exec(ctx, "UPDATE items SET data = $1 WHERE ref = $2", []byte("tampered"), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetItem(ctx, ref); err == nil || !strings.Contains(err.Error(), "corrupt") || errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetItem of tampered bytes: %v, want a corruption error", err)
	}
}

// A ledger written at schema version 2, before operations had facts, is
// upgraded when opened: its operations read back without facts, and the
// next attempt records its own.
func TestUpgradeFromVersion2AddsFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewLedger(t)
	raw := rawDB(t, dsn)
	if _, err := raw.Exec(ctx, `CREATE TABLE ledger_schema_version (
		version integer NOT NULL PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for v, m := range postgres.Migrations[:2] {
		if _, err := raw.Exec(ctx, m); err != nil {
			t.Fatalf("migration %d: %v", v+1, err)
		}
		if _, err := raw.Exec(ctx, "INSERT INTO ledger_schema_version (version) VALUES ($1)", v+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(ctx, `INSERT INTO operations (operation_id, task_id, request_hash, state, fence,
		created_at, updated_at) VALUES ('op-old', 'task-old', 'h', 'UNKNOWN', 1, now(), now())`); err != nil {
		t.Fatal(err)
	}

	s := open(t, dsn, nil)
	old, err := s.Get(ctx, "op-old")
	if err != nil {
		t.Fatal(err)
	}
	if old.State != capstan.OutcomeUnknown || old.Facts != nil {
		t.Fatalf("operation written at version 2 reads back as %s with facts %q, want UNKNOWN without facts", old.State, old.Facts)
	}
	c, err := s.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: "op-new", RequestHash: "h"}, Owner: "w/1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	facts := []byte(`{"head_sha":"abc"}`)
	if err := s.MarkRunning(ctx, "op-new", c.Op.Fence, facts); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "op-new"); err != nil || string(got.Facts) != string(facts) {
		t.Fatalf("Get after MarkRunning on the upgraded ledger: facts %q, %v; want %q", got.Facts, err, facts)
	}
	var v int
	if err := raw.QueryRow(ctx, "SELECT max(version) FROM ledger_schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != postgres.SchemaVersion {
		t.Fatalf("schema version %d after the upgrade, want %d", v, postgres.SchemaVersion)
	}
}

// With CAPSTAN_CODEC_KEYS, the database holds no item, turn output or
// result in plaintext (ledgertest.RunSealed).
func TestContractSealed(t *testing.T) {
	t.Parallel()
	pgtest.AdminDSN(t)
	ledgertest.RunSealed(t, func(t *testing.T) string { return pgtest.NewLedger(t) }, func(t *testing.T, dsn string, now func() time.Time, sealer ledger.Sealer) (ledger.Store, func() []byte) {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{Logger: testLogger(t), Sealer: sealer})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		postgres.SetDatabaseClock(s, now)
		var st ledger.Store = s
		if sealer != nil {
			st = ledger.Sealed(s, sealer)
		}
		return st, func() []byte {
			conn := rawDB(t, dsn)
			var all []byte
			for _, q := range []string{"SELECT data FROM items", "SELECT output FROM turns", "SELECT coalesce(result, ''::bytea) FROM operations"} {
				rows, err := conn.Query(context.Background(), q)
				if err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				for rows.Next() {
					var b []byte
					if err := rows.Scan(&b); err != nil {
						t.Fatal(err)
					}
					all = append(all, b...)
				}
				rows.Close()
			}
			return all
		}
	})
}
