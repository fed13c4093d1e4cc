//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlite

import "time"

// writerLock orders the writers of Stores sharing a file on the systems
// with flock(2) (writerlock_unix.go). Elsewhere there is none: writers wait
// for each other through SQLite's busy timeout alone.
type writerLock struct{}

func openWriterLock(string) (*writerLock, error) { return nil, nil }

func (*writerLock) acquire(time.Duration) bool { return false }
func (*writerLock) release()                   {}
func (*writerLock) close() error               { return nil }
