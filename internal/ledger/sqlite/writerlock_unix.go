//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// writerLock is an exclusive flock(2) on a sidecar file (the database path
// + "-writer") that a Store holds around each group's BEGIN IMMEDIATE …
// COMMIT (commitGroup). Stores sharing a file — worker processes, or two
// Stores of one process, since flock belongs to the open file description —
// wait for each other in the kernel and wake the moment the holder lets go,
// where SQLite's busy handler would sleep in steps (1, 2, 5, 10 ms …)
// between tries of the database lock.
//
// The lock only orders writers that take it; it guards nothing by itself.
// The database lock is still taken by BEGIN IMMEDIATE, and SQLite's busy
// timeout still applies to writers that do not take the lock (the retention
// job of an older binary, a tool opening the file): correctness never
// depends on the sidecar, only the wake-up does. A wait for it is bounded
// by the busy timeout: if the holder does not let go in time (a stopped
// process), the write proceeds without it and meets SQLite's busy timeout,
// as it would have without the sidecar.
//
// acquire and release are called by one goroutine at a time (a Store's
// group-commit leader); Close may run concurrently with them.
type writerLock struct {
	mu     sync.Mutex
	fd     int
	flying bool       // a blocking flock call runs in wait()
	waiter chan error // who wait() answers; nil: nobody, so it lets go at once
	held   bool       // acquire returned true and release has not run
	closed bool       // Close ran; whoever uses fd last closes it
}

// openWriterLock opens (creating if needed) the sidecar lock file of the
// database at dbPath.
func openWriterLock(dbPath string) (*writerLock, error) {
	path := dbPath + "-writer"
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the writers' lock file %q: %w", path, err)
	}
	return &writerLock{fd: fd}, nil
}

// acquire takes the lock, waiting for it at most timeout, and reports
// whether it holds it. false means the write goes ahead unordered, relying
// on SQLite's busy timeout alone.
func (l *writerLock) acquire(timeout time.Duration) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	if !l.flying {
		if err := flock(l.fd, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			l.held = true
			l.mu.Unlock()
			return true
		} else if !errors.Is(err, syscall.EWOULDBLOCK) {
			l.mu.Unlock()
			return false
		}
		l.flying = true
		go l.wait()
	}
	// A flock call is in flight (ours, or one whose waiter gave up): wait
	// for its answer.
	ch := make(chan error, 1)
	l.waiter = ch
	l.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-ch:
		return err == nil
	case <-t.C:
		l.mu.Lock()
		if l.waiter == ch { // not answered: wait() will let go at once
			l.waiter = nil
			l.mu.Unlock()
			return false
		}
		l.mu.Unlock()
		return <-ch == nil // answered meanwhile; ch is buffered
	}
}

// wait runs one blocking flock(LOCK_EX) and hands its outcome to the
// waiter of the moment; with none, a lock it got is let go at once, so a
// waiter that gave up never leaves the other Stores locked out.
func (l *writerLock) wait() {
	err := flock(l.fd, syscall.LOCK_EX)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flying = false
	if l.waiter != nil {
		l.held = err == nil // the waiter holds it now, and releases it
		l.waiter <- err
		l.waiter = nil
	} else if err == nil {
		flock(l.fd, syscall.LOCK_UN)
	}
	if l.closed && !l.held {
		syscall.Close(l.fd)
	}
}

// release lets go of a lock acquire returned true for.
func (l *writerLock) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	l.held = false
	flock(l.fd, syscall.LOCK_UN)
	if l.closed {
		syscall.Close(l.fd)
	}
}

// close closes the lock file once nothing uses it: at once, or when the
// flock in flight returns, or when the holder releases.
func (l *writerLock) close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.flying || l.held {
		return nil
	}
	return syscall.Close(l.fd)
}

// flock is flock(2), retried when a signal interrupts it.
func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}
