package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/ledger"
)

// CommitTurn implements ledger.Store: one write transaction inserts the
// items, then INSERT OR IGNORE the turn and, when an earlier commit won,
// reads back what it stored, so the statements see each other and the
// items are durable with the commit.
func (s *Store) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error) {
	if turnID == "" {
		return nil, errors.New("ledger/sqlite: commit turn: empty turn id")
	}
	if output == nil {
		output = []byte{}
	}
	var stored []byte
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		if err := s.putItems(ctx, tx, items, now); err != nil {
			return err
		}
		sc := ledger.ScopeOf(ctx)
		res, err := s.exec(ctx, tx, sqlInsertTurn, turnID, output, toNanos(now), sc.Token)
		if err != nil {
			return err
		}
		inserted, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if err := s.upsertChain(ctx, tx, sc, now); err != nil {
			return err
		}
		if inserted == 1 {
			stored = output // this commit won: what it wrote is what is stored
			return nil
		}
		if err := s.queryRowTx(ctx, tx, sqlGetTurn, turnID).Scan(&stored); err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: commit turn %s: %w", turnID, err))
	}
	return nonNil(stored), nil
}

// GetTurn implements ledger.Store.
func (s *Store) GetTurn(ctx context.Context, turnID string) ([]byte, error) {
	var out []byte
	err := s.queryRow(ctx, sqlGetTurn, turnID).Scan(&out)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("ledger/sqlite: get turn %s: %w", turnID, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: get turn %s: %w", turnID, err))
	}
	return nonNil(out), nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
