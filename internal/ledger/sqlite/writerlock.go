package sqlite

import (
	"context"
	"os"
	"sync"
	"time"
)

// writerLock orders the writes of every Store open on one database file, in
// this process and in the other worker processes of a machine: a Store
// begins a write only while it holds the lock. It decides nothing about
// correctness — SQLite's own locking still lets one writer at a time into
// the file, and a writer that finds it locked still waits under
// busy_timeout — it only spares writers SQLite's way of waiting: its busy
// handler polls, sleeping 1, 2, 5, 10 … up to 100 ms between tries, so a
// write that finds the file locked for one fsync (about a millisecond)
// often waits ten. A writer blocked on this lock is woken by the kernel the
// moment the previous one releases it.
//
// The lock is an flock(2) on a file beside the database (the database path
// plus "-writer.lock"; unix only, see flockFile), taken after a semaphore
// that admits one write of this Store at a time, since an flock is held per
// open file, not per goroutine.
type writerLock struct {
	sem  chan struct{}
	file *os.File // nil where flock is unavailable or the file could not be opened

	// mu guards waiters, the flock calls still blocked for a write that
	// gave up on them, and closed: the file is closed by close or, after
	// it, by the last of those waiters, never under one.
	mu      sync.Mutex
	waiters int
	closed  bool
}

// maxLockWait bounds the wait for the file lock. Past it the write goes
// ahead without it, and SQLite's busy handler orders it as before.
const maxLockWait = busyTimeoutMillis * time.Millisecond

func newWriterLock(dbPath string) (*writerLock, error) {
	l := &writerLock{sem: make(chan struct{}, 1)}
	f, err := openLockFile(dbPath + "-writer.lock")
	if err != nil {
		return l, err
	}
	l.file = f
	return l, nil
}

// lock waits for this Store's turn to write and then, when it can, for the
// file lock. It fails only when ctx ends first; held says whether the file
// lock was taken, for unlock.
func (l *writerLock) lock(ctx context.Context) (held bool, err error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if l.file == nil {
		return false, nil
	}
	if flockFile(l.file, false) == nil {
		return true, nil // uncontended: no goroutine needed
	}
	got := make(chan error, 1)
	l.mu.Lock()
	l.waiters++
	l.mu.Unlock()
	go func() {
		err := flockFile(l.file, true)
		got <- err
	}()
	timeout := time.NewTimer(maxLockWait)
	defer timeout.Stop()
	select {
	case err := <-got:
		l.waited()
		return err == nil, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout.C:
	}
	// Given up on: release the file lock when the waiting call gets it.
	go func() {
		if <-got == nil {
			_ = funlockFile(l.file)
		}
		l.waited()
	}()
	if err != nil {
		<-l.sem
		return false, err
	}
	return false, nil
}

// unlock ends a write begun after lock.
func (l *writerLock) unlock(held bool) {
	if held {
		_ = funlockFile(l.file)
	}
	<-l.sem
}

// waited ends one blocked flock call; the last one after close closes the
// file.
func (l *writerLock) waited() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiters--
	if l.closed && l.waiters == 0 {
		_ = l.file.Close()
	}
}

// close closes the lock file, or leaves it to the last flock call still
// blocked on it.
func (l *writerLock) close() error {
	if l.file == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.waiters > 0 {
		return nil
	}
	return l.file.Close()
}
