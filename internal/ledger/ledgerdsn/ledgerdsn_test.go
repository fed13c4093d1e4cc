package ledgerdsn

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger/postgres"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn      string
		path     string // want this SQLite path, or
		postgres string // this PostgreSQL DSN, or
		errHas   string // an error containing this
	}{
		{dsn: "sqlite:///var/lib/capstan/ledger.db", path: "/var/lib/capstan/ledger.db"},
		{dsn: "sqlite://relative/path.db", path: "relative/path.db"},
		{dsn: "SQLite://x.db", path: "x.db"},
		{dsn: "sqlite://.capstan/ledger.db", path: ".capstan/ledger.db"},
		{dsn: "  sqlite:///trimmed.db\n", path: "/trimmed.db"},
		{dsn: "sqlite:///dir with space/l@b.db", path: "/dir with space/l@b.db"},
		{dsn: "/abs/ledger.db", path: "/abs/ledger.db"},
		{dsn: "relative/ledger.db", path: "relative/ledger.db"},
		{dsn: "ledger.db", path: "ledger.db"},
		{dsn: "./a:b.db", path: "./a:b.db"},
		{dsn: `C:\capstan\ledger.db`, path: `C:\capstan\ledger.db`},
		{dsn: "postgres://capstan:s3cret@db:5432/capstan", postgres: "postgres://capstan:s3cret@db:5432/capstan"},
		{dsn: "postgresql://capstan@db/capstan?sslmode=require", postgres: "postgresql://capstan@db/capstan?sslmode=require"},
		{dsn: " POSTGRES://db/capstan ", postgres: "postgres://db/capstan"},
		{dsn: "", errHas: "CAPSTAN_LEDGER_DSN is empty; want sqlite://PATH, postgres://USER:PASSWORD@HOST:5432/DATABASE or a file path"},
		{dsn: "sqlite://", errHas: `"sqlite://": no database path`},
		{dsn: "sqlite:relative.db", errHas: `"sqlite:relative.db": want sqlite://PATH (sqlite:///abs/path.db for an absolute path)`},
		{dsn: "sqlite:///x.db?_pragma=foo", errHas: "query parameters are not supported"},
		{dsn: "postgres:capstan:s3cret@db", errHas: `want postgres://USER:PASSWORD@HOST:5432/DATABASE`},
		{dsn: "mysql://root:hunter2@db/capstan", errHas: `CAPSTAN_LEDGER_DSN "mysql://root:xxxxx@db/capstan": unsupported scheme "mysql" (want sqlite://PATH, postgres://`},
		{dsn: "file:///x.db", errHas: `unsupported scheme "file"`},
		{dsn: "foo:bar.db", errHas: `unsupported scheme "foo"`},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			got, err := parse(tt.dsn)
			if tt.errHas == "" {
				if err != nil || got.sqlitePath != tt.path || got.postgresDSN != tt.postgres {
					t.Fatalf("parse(%q) = %+v, %v; want path %q postgres %q", tt.dsn, got, err, tt.path, tt.postgres)
				}
				return
			}
			if err == nil {
				t.Fatalf("parse(%q) = %+v, want an error containing %q", tt.dsn, got, tt.errHas)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not contain %q", err, tt.errHas)
			}
			for _, secret := range []string{"s3cret", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q leaks the password", err)
				}
			}
		})
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:pw@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:p@ss/w@rd@h:5432/db?sslmode=require", "postgres://u:xxxxx@h:5432/db?sslmode=require"},
		{"postgres://h/db?user=u&password=pw&sslmode=disable", "postgres://h/db?user=u&password=xxxxx&sslmode=disable"},
		{"host=h user=u password='a b\\' c' dbname=x", "host=h user=u password=xxxxx dbname=x"},
		{"host=h PASSWORD=pw sslpassword=k", "host=h PASSWORD=xxxxx sslpassword=xxxxx"},
		{"postgres:u:pw@h/db", "postgres:u:xxxxx@h/db"},
		{"sqlite:///home/me/ledger.db", "sqlite:///home/me/ledger.db"},
		{"/srv/a:b@c/ledger.db", "/srv/a:b@c/ledger.db"},
		{"sqlite:///srv/a@b/ledger.db", "sqlite:///srv/a@b/ledger.db"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDefaultLedgerDSN(t *testing.T) {
	t.Parallel()
	if got := config.DefaultLedgerDSN; got != "sqlite://.capstan/ledger.db" {
		t.Fatalf("config.DefaultLedgerDSN = %q", got)
	}
	if got, err := parse(config.DefaultLedgerDSN); err != nil || got.sqlitePath != filepath.Join(".capstan", "ledger.db") {
		t.Fatalf("DefaultDSN parses to %+v, %v", got, err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "a", "ledger.db"), // absolute: three slashes
		filepath.Join(dir, "b.db"),
	} {
		s, err := Open(ctx, dsn, Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		if _, err := s.PutItem(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "ledger.db")); err != nil {
		t.Fatal(err)
	}

	t.Chdir(dir)
	s, err := Open(ctx, config.DefaultLedgerDSN, Options{})
	if err != nil {
		t.Fatalf("Open(config.DefaultLedgerDSN): %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, ".capstan", "ledger.db")); err != nil {
		t.Fatalf("default ledger not created under the working directory: %v", err)
	}

	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, "sqlite://"+blocker+"/ledger.db", Options{})
	if err == nil || !strings.Contains(err.Error(), `CAPSTAN_LEDGER_DSN "sqlite://`+blocker) {
		t.Fatalf("Open under a regular file: %v, want an error naming the DSN", err)
	}
}

// A postgres:// DSN opens the PostgreSQL store, and its errors are one line
// naming the server and the masked DSN, never the password.
func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dsn := "postgres://capstan:s3cret@" + addr + "/capstan"
	_, err := Open(ctx, dsn, Options{})
	want := `CAPSTAN_LEDGER_DSN "postgres://capstan:xxxxx@` + addr + `/capstan": ledger/postgres: cannot connect to PostgreSQL at ` + addr
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open of an unreachable server: %v; want one line starting %q without the password", err, want)
	}
	_, err = Open(ctx, "postgresql://capstan:s3cret@db:port/capstan", Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot parse the DSN: invalid port") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open of a bad DSN: %v", err)
	}

	s, err := Open(ctx, pgtest.NewLedger(t), Options{})
	if err != nil {
		t.Fatalf("Open(postgres): %v", err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Fatalf("Open(postgres) returned a %T, want *postgres.Store", s)
	}
	ref, err := s.PutItem(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.GetItem(ctx, ref); err != nil || string(b) != "x" {
		t.Fatalf("GetItem: %q, %v", b, err)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
