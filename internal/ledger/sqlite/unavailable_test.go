package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// TestLockedFileIsUnavailable: while another process holds the ledger
// file's write lock past the busy timeout, a write fails with an error
// that is ledger.ErrUnavailable (the caller may wait and write again); the
// ledger's own answers never are, and the write goes through once the lock
// is given back.
func TestLockedFileIsUnavailable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, time.Now)
	ctx := context.Background()
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Get of an unknown id: %v, want ErrNotFound and not ErrUnavailable", err)
	}

	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	req := ledger.ClaimRequest{Op: ledger.Operation{ID: "op-1", Kind: "k", RequestHash: "h"}, Owner: "w", Lease: time.Minute}
	if _, err := s.Claim(ctx, req); !errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("Claim with the file locked by another process: %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, req); err != nil {
		t.Errorf("Claim once the lock is given back: %v", err)
	}
}
