//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"path/filepath"
	"testing"
	"time"
)

// twoWriterLocks opens the writer lock of one ledger path twice. a closes
// when the test ends; closing b is the test's.
func twoWriterLocks(t *testing.T) (a, b *writerLock) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "ledger.db")
	a, err := openWriterLock(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close() })
	if b, err = openWriterLock(db); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// Two lock files opened on one path stand for two Stores: flock belongs to
// the open file description, so they exclude each other even in one process.
func TestWriterLockExcludesAndWakes(t *testing.T) {
	a, b := twoWriterLocks(t)
	defer b.close()

	if !a.acquire(time.Second) {
		t.Fatal("a: the free lock was not taken")
	}
	// While a holds it, b gives up after its timeout and goes on without.
	if b.acquire(10 * time.Millisecond) {
		t.Fatal("b: took the lock a holds")
	}
	// b waits again on the flock its first try left in flight; a letting
	// go wakes it.
	got := make(chan bool)
	go func() { got <- b.acquire(time.Minute) }()
	a.release()
	if !<-got {
		t.Fatal("b: not woken when a let go")
	}
	// Now a waits for b.
	go func() { got <- a.acquire(time.Minute) }()
	b.release()
	if !<-got {
		t.Fatal("a: not woken when b let go")
	}
	a.release()
}

// A wait that timed out leaves its flock in flight; when that flock gets
// the lock with nobody waiting, it lets go at once, so the other Store is
// not locked out.
func TestWriterLockAbandonedWaitLetsGo(t *testing.T) {
	a, b := twoWriterLocks(t)
	if !a.acquire(time.Second) {
		t.Fatal("a: the free lock was not taken")
	}
	if b.acquire(10 * time.Millisecond) {
		t.Fatal("b: took the lock a holds")
	}
	b.close() // closed with its flock in flight: closed when that returns
	a.release()
	if !a.acquire(time.Minute) {
		t.Fatal("a: locked out by b's abandoned wait")
	}
	a.release()
}
