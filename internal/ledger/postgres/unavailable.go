package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/capstanhq/capstan/internal/ledger"
)

// unavailable marks err ledger.ErrUnavailable when it shows the server
// could not be reached or could not answer (isUnavailable); any other
// error — the ledger's own answer, a constraint, a bug — is returned as it
// is.
func unavailable(err error) error {
	if isUnavailable(err) {
		return ledger.Unavailable(err)
	}
	return err
}

// unavailableStates are the SQLSTATEs of a server that cannot serve now:
// class 08 (connection exception), a shutdown or a start in progress, too
// many connections.
var unavailableStates = map[string]bool{
	"57P01": true, // admin_shutdown: the server is stopping
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now: the server is starting
	"53300": true, // too_many_connections
	"58000": true, // system_error
	"58030": true, // io_error
}

// isUnavailable reports whether err says PostgreSQL could not be reached or
// could not answer: a failed connect (refused, DNS, TLS, authentication
// timing out), a connection lost mid-call, a timeout, or a server shutting
// down or starting. A cancellation by the caller is not: it says nothing of
// the server.
func isUnavailable(err error) bool {
	var (
		connect *pgconn.ConnectError
		pgErr   *pgconn.PgError
		netErr  net.Error
	)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &pgErr):
		return strings.HasPrefix(pgErr.Code, "08") || unavailableStates[pgErr.Code]
	case errors.As(err, &connect), errors.As(err, &netErr),
		errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), pgconn.SafeToRetry(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx reports a connection it closed after a failure as a plain "conn
	// closed" error.
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "closed pool")
}
