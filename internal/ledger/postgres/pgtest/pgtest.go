// Package pgtest gives each test a PostgreSQL ledger of its own, so tests
// that use PostgreSQL never see each other's rows and may run in parallel.
//
// The server is named by CAPSTAN_TEST_POSTGRES_DSN, a DSN whose role may
// create schemas in its database; `eval "$(scripts/postgres.sh start)"`
// starts a private server and sets it. When the variable is unset a test that needs the server
// is skipped, except under CI=true, where it fails: the PostgreSQL tests never
// skip in CI.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the variable that points the tests at a server.
const EnvDSN = "CAPSTAN_TEST_POSTGRES_DSN"

// AdminDSN returns the DSN in CAPSTAN_TEST_POSTGRES_DSN, or ends t: skipped
// locally, failed under CI=true.
func AdminDSN(t testing.TB) string {
	t.Helper()
	dsn := strings.TrimSpace(os.Getenv(EnvDSN))
	if dsn != "" {
		return dsn
	}
	const how = EnvDSN + ` is not set; start a server with: eval "$(scripts/postgres.sh start)"`
	if os.Getenv("CI") == "true" {
		t.Fatal(how + " (CI=true: the PostgreSQL tests never skip in CI)")
	}
	t.Skip(how)
	return ""
}

// NewLedger returns a DSN for a ledger that is empty and t's alone: a schema
// of its own on the server of AdminDSN, made the DSN's search_path, and
// dropped with everything in it when t ends. (A schema, not a database:
// creating a database takes half a second, a schema next to nothing.)
// Register the cleanup of anything connected to it after calling NewLedger,
// so that it runs before the drop.
func NewLedger(t testing.TB) string {
	t.Helper()
	dsn, drop, err := NewSchema(AdminDSN(t), "capstan_test_")
	if err != nil {
		t.Fatalf("pgtest: on the server of %s: %v", EnvDSN, err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dsn
}

// NewSchema creates a schema named prefix and 16 random hex digits on the
// server of admin and returns admin with that schema as its search_path,
// and drop, which removes the schema and everything in it. The bench uses
// it too: its task ids repeat from run to run, so each run's pool needs an
// empty ledger.
func NewSchema(admin, prefix string) (dsn string, drop func() error, err error) {
	var b [8]byte
	rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if dsn, err = WithSearchPath(admin, name); err != nil {
		return "", nil, err
	}
	if err := exec("CREATE SCHEMA " + name); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	drop = func() error {
		if err := exec("DROP SCHEMA " + name + " CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}
	return dsn, drop, nil
}

// WithSearchPath returns dsn, a postgres:// URL or keyword=value settings,
// with its search_path set to schema.
func WithSearchPath(dsn, schema string) (string, error) {
	lower := strings.ToLower(dsn)
	if !strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://") {
		return dsn + " search_path=" + schema, nil // the last setting of a key wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("not a valid URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
