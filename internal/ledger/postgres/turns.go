package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan/internal/ledger"
)

// CommitTurn implements ledger.Store in one round trip: the inserts of the
// items and of the turn go as one batch, which the server runs as one
// implicit transaction.
func (s *Store) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error) {
	if turnID == "" {
		return nil, errors.New("ledger/postgres: commit turn: empty turn id")
	}
	if output == nil {
		output = []byte{}
	}
	now := s.nowArg() // the database's clock as each insert runs
	b := &pgx.Batch{}
	if err := s.queueItems(ctx, b, items, now); err != nil {
		return nil, fmt.Errorf("ledger/postgres: commit turn %s: %w", turnID, err)
	}
	sc := ledger.ScopeOf(ctx)
	// ON CONFLICT DO UPDATE with a no-op assignment returns the existing
	// row, locked, so the first commit's output comes back to everyone.
	var stored []byte
	b.Queue(`INSERT INTO turns (turn_id, output, created_at, scope) VALUES ($1, $2, `+dbNow(3)+`, $4)
		ON CONFLICT (turn_id) DO UPDATE SET turn_id = turns.turn_id RETURNING output`,
		turnID, output, now, sc.Token).QueryRow(func(row pgx.Row) error { return row.Scan(&stored) })
	queueChain(b, sc, now)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: commit turn %s: %w", turnID, err))
	}
	return nonNil(stored), nil
}

// GetTurn implements ledger.Store.
func (s *Store) GetTurn(ctx context.Context, turnID string) ([]byte, error) {
	var out []byte
	err := s.pool.QueryRow(ctx, "SELECT output FROM turns WHERE turn_id = $1", turnID).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("ledger/postgres: get turn %s: %w", turnID, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: get turn %s: %w", turnID, err))
	}
	return nonNil(out), nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
