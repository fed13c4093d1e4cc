package sqlite

import (
	"context"
	"errors"

	sqlite "modernc.org/sqlite"

	"github.com/capstanhq/capstan/internal/ledger"
)

// unavailable marks err ledger.ErrUnavailable when it shows the database
// file could not be used for now (isUnavailable); any other error is
// returned as it is.
func unavailable(err error) error {
	if isUnavailable(err) {
		return ledger.Unavailable(err)
	}
	return err
}

// Primary result codes of SQLite (https://sqlite.org/rescode.html) that
// say the file could not be used for now, rather than what it holds.
const (
	codeBusy     = 5  // SQLITE_BUSY: locked past busy_timeout
	codeLocked   = 6  // SQLITE_LOCKED
	codeIOErr    = 10 // SQLITE_IOERR: a read or write of the file failed
	codeFull     = 13 // SQLITE_FULL: the disk is full
	codeCantOpen = 14 // SQLITE_CANTOPEN
)

// isUnavailable reports whether err says the ledger's SQLite file could
// not be used for now: another process held its lock past the busy
// timeout, the disk failed, was full or could not be opened, or the call
// ran out of time. A cancellation by the caller is not.
func isUnavailable(err error) bool {
	var e *sqlite.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &e):
		switch e.Code() & 0xff { // the primary code of an extended one
		case codeBusy, codeLocked, codeIOErr, codeFull, codeCantOpen:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded)
}
