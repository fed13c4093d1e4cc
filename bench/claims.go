package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgertest"
	"github.com/capstanhq/capstan/internal/ledger/postgres"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// claimRow is claims per second on one store, by number of claimers, as
// ledgertest.BenchmarkClaimers measures it (the loop `go test -bench Claim`
// runs in internal/ledger/sqlite and internal/ledger/postgres).
type claimRow struct {
	store   string
	perSec  map[int]float64 // by claimers
	skipped string          // why the store was not measured
	err     error
}

var claimers = []int{1, 8}

// runClaims measures each store available: SQLite always, PostgreSQL when
// CAPSTAN_TEST_POSTGRES_DSN names a server.
func runClaims(ctx context.Context) []claimRow {
	rows := []claimRow{measureClaims("SQLite", func(b *testing.B) ledger.Store {
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})}
	pg := claimRow{store: "PostgreSQL"}
	switch err := postgresReachable(ctx); {
	case errors.Is(err, errNoPostgres):
		pg.skipped = "not measured: " + pgtest.EnvDSN + " is not set"
	case err != nil:
		pg.skipped = "not measured: " + err.Error()
	default:
		pg = measureClaims("PostgreSQL", func(b *testing.B) ledger.Store {
			s, err := postgres.Open(ctx, pgtest.NewLedger(b), postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		})
	}
	return append(rows, pg)
}

func measureClaims(store string, newStore func(b *testing.B) ledger.Store) claimRow {
	row := claimRow{store: store, perSec: map[int]float64{}}
	for _, n := range claimers {
		r := testing.Benchmark(func(b *testing.B) { ledgertest.BenchmarkClaimers(b, n, newStore) })
		v, ok := r.Extra["claims/s"]
		if r.N == 0 || !ok {
			row.err = fmt.Errorf("%s with %d claimers: the benchmark failed", store, n)
			return row
		}
		row.perSec[n] = v
		progress("ledger %-10s %d claimer(s): %.0f claims/s (%d claims)", store, n, v, r.N)
	}
	return row
}

var errNoPostgres = errors.New("no PostgreSQL server named")

// postgresReachable checks the server of CAPSTAN_TEST_POSTGRES_DSN before
// the benchmark uses it, so a missing server is a sentence in the table and
// not a failed benchmark.
func postgresReachable(ctx context.Context) error {
	dsn := strings.TrimSpace(os.Getenv(pgtest.EnvDSN))
	if dsn == "" {
		return errNoPostgres
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return fmt.Errorf("cannot connect to the server of %s", pgtest.EnvDSN)
	}
	return conn.Close(ctx)
}
