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
// A postgres:// or postgresql:// URL names a PostgreSQL ledger and is passed
// to package postgres as it is (user, password, host:port, database, and
// settings such as sslmode, search_path or pool_max_conns):
//
//	postgres://capstan:secret@db.internal:5432/capstan?sslmode=require
//
// Any other scheme is refused.
//
// Guarantees: a DSN is parsed without side effects before anything is opened,
// and no error this package returns contains a password from the DSN (see
// Redact).
package ledgerdsn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/postgres"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// Options configures the store Open opens, whichever it is. The zero value is
// ready to use.
type Options struct {
	// Now is this worker's clock, which a SQLite ledger stamps rows and
	// decides leases by (the file is on this machine, whose clock every
	// worker sharing it reads). Defaults to time.Now. A PostgreSQL ledger
	// ignores it: the workers of a pool run on machines whose clocks may
	// disagree, so it reads the database's clock (issue 14, item 7).
	Now func() time.Time
	// Logger receives the store's claim decisions and rejected stale-fence
	// writes. Defaults to slog.Default().
	Logger *slog.Logger
	// Sealer, when not nil, encrypts what the ledger stores of a task's
	// contents — transcript items, turn outputs, operation results — and
	// decrypts it as it is read (ledger.Sealer, internal/codec); nil
	// stores them plain, as before.
	Sealer ledger.Sealer
}

// Open opens the ledger named by dsn. Errors name the DSN, its password
// masked.
func Open(ctx context.Context, dsn string, opts Options) (ledger.Store, error) {
	t, err := parse(dsn)
	if err != nil {
		return nil, err
	}
	var s ledger.Store
	if t.postgresDSN != "" {
		s, err = openPostgres(ctx, t.postgresDSN, opts)
	} else {
		s, err = openSQLite(ctx, t.sqlitePath, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("CAPSTAN_LEDGER_DSN %q: %w", Redact(dsn), err)
	}
	if opts.Sealer != nil {
		s = ledger.Sealed(s, opts.Sealer)
	}
	return s, nil
}

// openSQLite and openPostgres return a nil interface, not a typed nil, on
// error.
func openSQLite(ctx context.Context, path string, opts Options) (ledger.Store, error) {
	s, err := sqlite.Open(ctx, path, sqlite.Options{Now: opts.Now, Logger: opts.Logger, Sealer: opts.Sealer})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string, opts Options) (ledger.Store, error) {
	s, err := postgres.Open(ctx, dsn, postgres.Options{Logger: opts.Logger, Sealer: opts.Sealer})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Check reports, without opening anything, why Open would refuse dsn as
// written; nil when it names a ledger Open can try.
func Check(dsn string) error {
	_, err := parse(dsn)
	return err
}

// target is what a DSN names: exactly one of a SQLite file and a PostgreSQL
// connection string.
type target struct {
	sqlitePath  string
	postgresDSN string
}

// forms lists the accepted DSNs for error messages.
const forms = "sqlite://PATH, postgres://USER:PASSWORD@HOST:5432/DATABASE or a file path"

// parse returns what dsn names, or an error naming the (redacted) DSN. It
// has no side effects.
func parse(dsn string) (target, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return target{}, errors.New("CAPSTAN_LEDGER_DSN is empty; want " + forms)
	}
	fail := func(format string, args ...any) (target, error) {
		return target{}, fmt.Errorf("CAPSTAN_LEDGER_DSN %q: %s", Redact(dsn), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := splitScheme(dsn)
	if !ok {
		return target{sqlitePath: dsn}, nil // a bare file path
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
		return target{sqlitePath: path}, nil
	case "postgres", "postgresql":
		if !strings.HasPrefix(rest, "//") {
			return fail("want %s://USER:PASSWORD@HOST:5432/DATABASE", scheme)
		}
		// pgx recognises a URL only by its lowercase scheme.
		return target{postgresDSN: scheme + ":" + rest}, nil
	default:
		return fail("unsupported scheme %q (want %s)", scheme, forms)
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
// included, and the slashes after "scheme:" missing) and password=, passwd=,
// pwd= and sslpassword= settings. It may mask more than needed, never less.
// Use it whenever a DSN is logged or shown.
func Redact(dsn string) string {
	start := -1
	if i := strings.Index(dsn, "://"); i >= 0 {
		start = i + len("://")
	} else if scheme, _, ok := splitScheme(dsn); ok {
		start = len(scheme) + len(":")
	}
	if start >= 0 {
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
