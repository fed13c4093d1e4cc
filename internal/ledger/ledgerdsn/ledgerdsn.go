// Package ledgerdsn opens the ledger a DSN names (CAPSTAN_LEDGER_DSN,
// docs/design.md §8).
//
// Accepted forms:
//
//	sqlite:///var/lib/capstan/ledger.db   absolute path: sqlite:// followed by /var/...
//	sqlite://.capstan/ledger.db           relative to the working directory
//	/var/lib/capstan/ledger.db            a bare file path, absolute or relative
//	./ledger.db, ledger.db                (a bare path containing ':' needs a
//	                                      directory part, e.g. ./a:b.db)
//
// Everything after "sqlite://" is the path, verbatim: no host, no
// percent-decoding, no "~" expansion, and no query parameters (the SQLite
// settings are fixed by package sqlite). "sqlite:relative.db" without the two
// slashes is refused rather than guessed at.
//
// postgres:// and postgresql:// are recognised and refused until the
// PostgreSQL store exists; any other scheme is refused.
//
// Guarantees: a DSN is parsed without side effects before anything is opened,
// and no error this package returns contains a password from the DSN (see
// Redact).
package ledgerdsn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// DefaultDSN is the ledger used when CAPSTAN_LEDGER_DSN is not set: a SQLite
// file under .capstan in the working directory.
func DefaultDSN() string { return "sqlite://.capstan/ledger.db" }

// Open opens the ledger named by dsn. opts configures a SQLite ledger.
func Open(ctx context.Context, dsn string, opts sqlite.Options) (ledger.Store, error) {
	path, err := sqlitePath(dsn)
	if err != nil {
		return nil, err
	}
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("CAPSTAN_LEDGER_DSN %q: %w", Redact(dsn), err)
	}
	return s, nil
}

// ErrPostgresUnsupported is wrapped by the error Open returns for a
// postgres:// or postgresql:// DSN; a later release adds the PostgreSQL store.
var ErrPostgresUnsupported = errors.New("PostgreSQL ledgers are not supported yet; use sqlite://PATH")

// sqlitePath returns the database file dsn names, or an error naming the
// (redacted) DSN.
func sqlitePath(dsn string) (string, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return "", errors.New("CAPSTAN_LEDGER_DSN is empty; want sqlite://PATH")
	}
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("CAPSTAN_LEDGER_DSN %q: %s", Redact(dsn), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := splitScheme(dsn)
	if !ok {
		return dsn, nil // a bare file path
	}
	switch scheme {
	case "sqlite":
		path, ok := strings.CutPrefix(rest, "//")
		switch {
		case !ok:
			return fail("want sqlite://PATH (sqlite:///abs/path.db for an absolute path)")
		case path == "":
			return fail("no database path after sqlite://")
		case strings.ContainsAny(path, "?#"):
			return fail("query parameters are not supported; want sqlite://PATH")
		}
		return path, nil
	case "postgres", "postgresql":
		return "", fmt.Errorf("CAPSTAN_LEDGER_DSN %q: %w", Redact(dsn), ErrPostgresUnsupported)
	default:
		return fail("unsupported scheme %q (want sqlite://PATH or a file path)", scheme)
	}
}

// splitScheme splits "scheme:rest" when dsn starts with an RFC 3986 scheme of
// at least two characters (one letter would be a Windows drive). The scheme
// is lowercased.
func splitScheme(dsn string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(dsn, ':')
	if i < 2 {
		return "", "", false
	}
	for j, c := range dsn[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	return strings.ToLower(dsn[:i]), dsn[i+1:], true
}

// passwordParam matches password-like key=value settings in a query string or
// a key/value connection string, quoted or not.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:ssl)?(?:password|passwd|pwd)=)('(?:[^'\\]|\\.)*'|[^&;\s]*)`)

// Redact returns dsn with passwords masked as "xxxxx": the password of a
// user:password@ authority (an unescaped '@' or '/' inside the password
// included) and password=, passwd=, pwd= and sslpassword= settings. It may
// mask more than needed, never less. Use it whenever a DSN is logged or shown.
func Redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		start := i + len("://")
		head := dsn[start:]
		if q := strings.IndexAny(head, "?#"); q >= 0 {
			head = head[:q]
		}
		// The last '@' before the query ends the user information, so a
		// password containing an unescaped '@' or '/' is masked whole.
		if at := strings.LastIndexByte(head, '@'); at >= 0 {
			if c := strings.IndexByte(head[:at], ':'); c >= 0 {
				dsn = dsn[:start+c+1] + "xxxxx" + dsn[start+at:]
			}
		}
	}
	return passwordParam.ReplaceAllString(dsn, "${1}xxxxx")
}
