//go:build unix

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// A write waits for the writer lock another process holds on the file
// beside the database, and goes ahead once it is released; a reader does
// not wait for it.
func TestWritesQueueOnTheWriterLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ref, err := s.PutItem(ctx, []byte("before"))
	if err != nil {
		t.Fatal(err)
	}

	// Another process's writer: an open file of its own, locked.
	other, err := os.OpenFile(path+"-writer.lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the writer lock file is not beside the database: %v", err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	req := ledger.ClaimRequest{Op: ledger.Operation{ID: "op-1", TaskID: "T", Kind: "k", RequestHash: "h"},
		Owner: "w#1", Lease: time.Minute}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := s.Claim(short, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim while another writer holds the lock: %v, want it to wait until its context ends", err)
	}
	if _, err := s.Get(ctx, "op-1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get after the claim that waited: %v, want ErrNotFound (nothing written)", err)
	}
	if data, err := s.GetItem(ctx, ref); err != nil || string(data) != "before" {
		t.Fatalf("GetItem while the lock is held = %q, %v; readers do not wait for it", data, err)
	}

	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, req)
	if err != nil || res.Status != ledger.Claimed {
		t.Fatalf("Claim after the lock was released = %+v, %v; want claimed", res, err)
	}
}
