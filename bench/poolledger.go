package main

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
)

// poolSchema gives the 2-worker pool a PostgreSQL schema of its own on the
// server dsn names: the bench's task ids repeat from run to run, so a
// ledger that kept an earlier run's operations would answer this run's
// claims with them. It returns the DSN with the schema as its search_path
// (the ledger creates its tables there) and a drop for the end of the run.
func poolSchema(dsn string) (string, func(), error) {
	lower := strings.ToLower(dsn)
	if !strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://") {
		return "", nil, fmt.Errorf("-pool-ledger must be a postgres:// or postgresql:// URL")
	}
	pool, drop, err := pgtest.NewSchema(dsn, "capstan_bench_")
	if err != nil {
		// pgx names every address it tried, one per line; the last line
		// says why the last one failed.
		lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
		return "", nil, fmt.Errorf("-pool-ledger: %s: %s", ledgerdsn.Redact(dsn), strings.TrimSpace(lines[len(lines)-1]))
	}
	return pool, func() {
		if err := drop(); err != nil {
			progress("%v", err)
		}
	}, nil
}
