package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/ledger/ledgertest"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func open(t *testing.T, path string, now func() time.Time) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: now, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T, now func() time.Time) ledger.Store {
		return open(t, filepath.Join(t.TempDir(), "ledger.db"), now)
	})
}

// A ledger written before the one vocabulary holds the old state
// spellings; rewrite puts them into the file through a connection of its
// own, as an older release's worker would have.
func TestContractOldRows(t *testing.T) {
	t.Parallel()
	ledgertest.RunOldRows(t, func(t *testing.T, now func() time.Time) (ledger.Store, func(id, state string)) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		s := open(t, path, now)
		db := rawDB(t, path)
		return s, func(id, state string) {
			if _, err := db.Exec(`UPDATE operations SET state = ? WHERE operation_id = ?`, state, id); err != nil {
				t.Fatalf("rewrite the state of %s: %v", id, err)
			}
		}
	})
}

// Workers of an older release take no writers' lock: Stores that take it
// and Stores that do not, on one file, still keep each other's writes apart
// through BEGIN IMMEDIATE and the busy timeout.
func TestContractSharedWithAnOlderWorker(t *testing.T) {
	t.Parallel()
	ledgertest.RunShared(t, func(t *testing.T, now func() time.Time) func() (ledger.Store, error) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		var n atomic.Int64
		return func() (ledger.Store, error) {
			opts := sqlite.Options{Now: now, Logger: testLogger(t)}
			if n.Add(1)%2 == 0 {
				opts = sqlite.WithoutWriterLock(opts)
			}
			s, err := sqlite.Open(context.Background(), path, opts)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			return s, nil
		}
	})
}

// Several Stores on one file stand in for several worker processes: each has
// its own write connection, so only BEGIN IMMEDIATE and the busy timeout keep
// them apart.
func TestContractShared(t *testing.T) {
	t.Parallel()
	ledgertest.RunShared(t, func(t *testing.T, now func() time.Time) func() (ledger.Store, error) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func() (ledger.Store, error) {
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: now, Logger: testLogger(t)})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			return s, nil
		}
	})
}

// Workers whose clocks are off: a SQLite file lives on one machine, and
// every worker process on that machine reads the same clock, which is the
// ledger's. So each store is opened, as a worker on the machine would open
// it, with the machine's clock, ledgerNow; a worker clock apart from it
// cannot happen.
func TestContractClocks(t *testing.T) {
	t.Parallel()
	ledgertest.RunClocks(t, func(t *testing.T, ledgerNow func() time.Time) func(func() time.Time) (ledger.Store, error) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func(func() time.Time) (ledger.Store, error) {
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: ledgerNow, Logger: testLogger(t)})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			return s, nil
		}
	})
}

// BenchmarkClaim reports claims/s with 1 and 8 concurrent claimers:
//
//	go test -run '^$' -bench Claim ./internal/ledger/sqlite/
func BenchmarkClaim(b *testing.B) {
	ledgertest.BenchmarkClaim(b, func(b *testing.B) ledger.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"), sqlite.Options{})
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
//	go test -run '^$' -bench DecidedClaim ./internal/ledger/sqlite/
func BenchmarkDecidedClaim(b *testing.B) {
	ledgertest.BenchmarkDecidedClaim(b, func(b *testing.B) ledger.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"), sqlite.Options{})
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
//	go test -run '^$' -bench Task -cpuprofile cpu.out ./internal/ledger/sqlite/
func BenchmarkTask(b *testing.B) {
	ledgertest.BenchmarkTask(b, func(b *testing.B) ledger.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "ledger.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

func TestOpenCreatesParentDirectories(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a", "b", "c", "ledger.db")
	s := open(t, path, nil)
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
}

func TestOpenErrorsNameThePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDB := filepath.Join(dir, "notes.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("this is a text file, not a database\n", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"parent is a regular file", filepath.Join(regular, "ledger.db"), "create parent directory"},
		{"not a database", notDB, "not a database"},
		{"a directory", dir, "is a directory"},
		{"empty path", "", "empty database path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlite.Open(context.Background(), tt.path, sqlite.Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tt.path)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if tt.path != "" && !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not name the path %q", err, tt.path)
			}
		})
	}
	// The text file is left as it was.
	if b, _ := os.ReadFile(notDB); !strings.HasPrefix(string(b), "this is a text file") {
		t.Errorf("Open modified the non-database file")
	}
}

// rawDB opens the file with plain database/sql to look at what Open left.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestWALIsOn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, nil)
	if _, err := s.PutItem(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := rawDB(t, path).QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode = %q, want wal (persistent in the file)", mode)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no write-ahead log next to the database: %v", err)
	}
}

func TestPathWithURICharacters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "odd?name#1%20.db")
	s := open(t, path, nil)
	if _, err := s.PutItem(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not created at the literal path: %v", err)
	}
}

func TestItemsStoredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, nil)
	for range 3 {
		if _, err := s.PutItem(ctx, []byte("same")); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d item rows, want 1", n)
	}
}

func TestCorruptItemIsNotReturned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, nil)
	ref, err := s.PutItem(ctx, []byte("original"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec("UPDATE items SET data = ? WHERE ref = ?", []byte("tampered"), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetItem(ctx, ref); err == nil || !strings.Contains(err.Error(), "corrupt") || errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetItem of tampered bytes: %v, want a corruption error", err)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, nil)
	s.Close()
	if _, err := rawDB(t, path).Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	if s, err := sqlite.Open(context.Background(), path, sqlite.Options{}); err == nil {
		s.Close()
		t.Fatal("Open of a newer schema succeeded")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("error %q, want it to say the schema is newer", err)
	}
}

// schemaV2 is the operations table as schema version 2 created it, before
// operations had facts.
const schemaV2 = `CREATE TABLE operations (
	operation_id TEXT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL DEFAULT '',
	task_id TEXT NOT NULL DEFAULT '', turn_id TEXT NOT NULL DEFAULT '',
	tool_call_id TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL DEFAULT '',
	business_key TEXT NOT NULL DEFAULT '', request_hash TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL, lease_owner TEXT NOT NULL DEFAULT '', lease_expires_at INTEGER,
	fence INTEGER NOT NULL, attempt_count INTEGER NOT NULL DEFAULT 0,
	external_id TEXT NOT NULL DEFAULT '', result BLOB, error TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
INSERT INTO operations (operation_id, task_id, request_hash, state, fence, created_at, updated_at)
	VALUES ('op-old', 'task-old', 'h', 'UNKNOWN', 1, 1, 1);
PRAGMA user_version = 2;`

// A ledger written at schema version 2 is upgraded when opened: its
// operations read back without facts and the next attempt records its own.
// The upgrade is idempotent: a database whose version says 2 although the
// column is there (an upgrade by a binary that did not bump the version, or
// a hand-made copy) opens too.
func TestUpgradeFromVersion2AddsFacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if _, err := rawDB(t, path).Exec(schemaV2); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		s := open(t, path, nil)
		old, err := s.Get(ctx, "op-old")
		if err != nil {
			t.Fatal(err)
		}
		if old.State != capstan.OutcomeUnknown || old.Facts != nil {
			t.Fatalf("round %d: operation written at version 2 reads back as %s with facts %q, want UNKNOWN without facts", round, old.State, old.Facts)
		}
		id := fmt.Sprintf("op-new-%d", round)
		c, err := s.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: id, RequestHash: "h"}, Owner: "w/1", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		facts := []byte(`{"head_sha":"abc"}`)
		if err := s.MarkRunning(ctx, id, c.Op.Fence, facts); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, id); err != nil || string(got.Facts) != string(facts) {
			t.Fatalf("round %d: Get after MarkRunning on the upgraded ledger: facts %q, %v; want %q", round, got.Facts, err, facts)
		}
		if _, created, err := s.RecordDecision(ctx, ledger.Decision{OperationID: id, TaskID: "T", Effect: "allow", Rule: "default/allow"}); err != nil || !created {
			t.Fatalf("round %d: RecordDecision on the upgraded ledger: %v, %v; want created", round, created, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := rawDB(t, path).QueryRow("PRAGMA user_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 7 {
			t.Fatalf("round %d: user_version %d after the upgrade, want 7", round, v)
		}
		// Round 1 opens a database that says 2 but has the column.
		if _, err := rawDB(t, path).Exec("PRAGMA user_version = 2"); err != nil {
			t.Fatal(err)
		}
	}
}

// A ledger written at schema version 3 is upgraded to 4: its turns get an
// empty scope, and the items it held are pinned (owned by tasks without a
// scope), so retention never deletes them even when a chain that shares
// one by content is removed.
func TestUpgradeToVersion4PinsOlderItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if _, err := rawDB(t, path).Exec(schemaV2 + `
ALTER TABLE operations ADD COLUMN facts BLOB;
CREATE TABLE items (ref TEXT NOT NULL PRIMARY KEY, data BLOB NOT NULL, size INTEGER NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE turns (turn_id TEXT NOT NULL PRIMARY KEY, output BLOB NOT NULL, created_at INTEGER NOT NULL);
INSERT INTO items VALUES ('` + ledger.ItemRef([]byte("old")) + `', CAST('old' AS BLOB), 3, 1);
INSERT INTO turns VALUES ('task-old/t1', CAST('out' AS BLOB), 1);
PRAGMA user_version = 3;`); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, nil)
	sc := ledger.Scope{Token: "~cccccccccccc", Namespace: "ns", WorkflowID: "task-T", RunID: "r", TaskID: "T"}
	if _, err := s.CommitTurn(ledger.WithScope(ctx, sc), "T/~cccccccccccc/t1", []byte("new"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	chains, err := s.Chains(ctx, time.Now().Add(time.Hour))
	if err != nil || len(chains) != 1 {
		t.Fatalf("Chains = %+v, %v; want the one chain", chains, err)
	}
	if r, err := s.RemoveChain(ctx, chains[0], false); err != nil || r.Turns != 1 || r.Items != 0 {
		t.Fatalf("RemoveChain = %+v, %v; want its turn removed and the older item kept", r, err)
	}
	if _, err := s.GetItem(ctx, ledger.ItemRef([]byte("old"))); err != nil {
		t.Fatalf("the item stored before version 4: %v", err)
	}
	if u, err := s.CountUnscoped(ctx); err != nil || u.Turns != 1 || u.Operations != 1 {
		t.Fatalf("CountUnscoped = %+v, %v; want the older turn and operation", u, err)
	}
}

// A write whose context has ended is not run: it fails with the context's
// error and writes nothing, whether or not other writes share its commit.
func TestCancelledWriteWritesNothing(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := ledger.ClaimRequest{Op: ledger.Operation{ID: "op-1", Kind: "k", RequestHash: "h"}, Owner: "w#1", Lease: time.Minute}
	if _, err := s.Claim(ctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Get(context.Background(), "op-1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get after the cancelled claim: %v, want ErrNotFound", err)
	}
}

// With CAPSTAN_CODEC_KEYS, the file holds no item, turn output or result
// in plaintext (ledgertest.RunSealed).
func TestContractSealed(t *testing.T) {
	t.Parallel()
	ledgertest.RunSealed(t, func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger.db") },
		func(t *testing.T, where string, now func() time.Time, s ledger.Sealer) (ledger.Store, func() []byte) {
			st, err := ledgerdsn.Open(context.Background(), where, ledgerdsn.Options{Now: now, Logger: testLogger(t), Sealer: s})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st, func() []byte { return dumpSQLite(t, where) }
		})
}

func dumpSQLite(t *testing.T, path string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var all []byte
	for _, q := range []string{"SELECT data FROM items", "SELECT output FROM turns", "SELECT coalesce(result, x'') FROM operations"} {
		rows, err := db.Query(q)
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
