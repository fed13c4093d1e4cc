//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

var errNoFlock = errors.New("flock is not available on this platform")

// openLockFile opens nothing where flock(2) is not available: writes are
// then ordered by SQLite's busy handler alone.
func openLockFile(string) (*os.File, error) { return nil, nil }

func flockFile(*os.File, bool) error { return errNoFlock }

func funlockFile(*os.File) error { return errNoFlock }
