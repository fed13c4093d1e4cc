package ledgerdsn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

func TestSQLitePath(t *testing.T) {
	tests := []struct {
		dsn     string
		path    string // want this path, or
		errHas  string // an error containing this
		postgre bool   // wrapping ErrPostgresUnsupported
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
		{dsn: "", errHas: "CAPSTAN_LEDGER_DSN is empty; want sqlite://PATH"},
		{dsn: "sqlite://", errHas: `"sqlite://": no database path`},
		{dsn: "sqlite:relative.db", errHas: `"sqlite:relative.db": want sqlite://PATH (sqlite:///abs/path.db for an absolute path)`},
		{dsn: "sqlite:///x.db?_pragma=foo", errHas: "query parameters are not supported"},
		{dsn: "postgres://capstan:s3cret@db:5432/capstan", errHas: `CAPSTAN_LEDGER_DSN "postgres://capstan:xxxxx@db:5432/capstan": PostgreSQL ledgers are not supported yet; use sqlite://PATH`, postgre: true},
		{dsn: "postgresql://capstan@db/capstan?sslmode=require", errHas: "PostgreSQL ledgers are not supported yet", postgre: true},
		{dsn: "POSTGRES://db/capstan", errHas: "not supported yet", postgre: true},
		{dsn: "mysql://root:hunter2@db/capstan", errHas: `CAPSTAN_LEDGER_DSN "mysql://root:xxxxx@db/capstan": unsupported scheme "mysql" (want sqlite://PATH or a file path)`},
		{dsn: "file:///x.db", errHas: `unsupported scheme "file"`},
		{dsn: "foo:bar.db", errHas: `unsupported scheme "foo"`},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			path, err := sqlitePath(tt.dsn)
			if tt.errHas == "" {
				if err != nil || path != tt.path {
					t.Fatalf("sqlitePath(%q) = %q, %v; want %q", tt.dsn, path, err, tt.path)
				}
				return
			}
			if err == nil {
				t.Fatalf("sqlitePath(%q) = %q, want an error containing %q", tt.dsn, path, tt.errHas)
			}
			if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error %q does not contain %q", err, tt.errHas)
			}
			if got := errors.Is(err, ErrPostgresUnsupported); got != tt.postgre {
				t.Errorf("errors.Is(err, ErrPostgresUnsupported) = %v, want %v", got, tt.postgre)
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
	tests := []struct{ in, want string }{
		{"postgres://u:pw@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u:p@ss/w@rd@h:5432/db?sslmode=require", "postgres://u:xxxxx@h:5432/db?sslmode=require"},
		{"postgres://h/db?user=u&password=pw&sslmode=disable", "postgres://h/db?user=u&password=xxxxx&sslmode=disable"},
		{"host=h user=u password='a b\\' c' dbname=x", "host=h user=u password=xxxxx dbname=x"},
		{"host=h PASSWORD=pw sslpassword=k", "host=h PASSWORD=xxxxx sslpassword=xxxxx"},
		{"sqlite:///home/me/ledger.db", "sqlite:///home/me/ledger.db"},
		{"sqlite:///srv/a@b/ledger.db", "sqlite:///srv/a@b/ledger.db"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDefaultDSN(t *testing.T) {
	if got := DefaultDSN(); got != "sqlite://.capstan/ledger.db" {
		t.Fatalf("DefaultDSN() = %q", got)
	}
	if path, err := sqlitePath(DefaultDSN()); err != nil || path != filepath.Join(".capstan", "ledger.db") {
		t.Fatalf("DefaultDSN parses to %q, %v", path, err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "a", "ledger.db"), // absolute: three slashes
		filepath.Join(dir, "b.db"),
	} {
		s, err := Open(ctx, dsn, sqlite.Options{})
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
	s, err := Open(ctx, DefaultDSN(), sqlite.Options{})
	if err != nil {
		t.Fatalf("Open(DefaultDSN()): %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, ".capstan", "ledger.db")); err != nil {
		t.Fatalf("default ledger not created under the working directory: %v", err)
	}

	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, "sqlite://"+blocker+"/ledger.db", sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), `CAPSTAN_LEDGER_DSN "sqlite://`+blocker) {
		t.Fatalf("Open under a regular file: %v, want an error naming the DSN", err)
	}
	if _, err := Open(ctx, "postgres://u:pw@h/db", sqlite.Options{}); !errors.Is(err, ErrPostgresUnsupported) {
		t.Fatalf("Open(postgres): %v", err)
	}
}
