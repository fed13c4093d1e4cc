package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/ledger"
)

// CommitTurn implements ledger.Store: INSERT OR IGNORE, then read back what
// won, on the one writer connection so the two statements see each other.
func (s *Store) CommitTurn(ctx context.Context, turnID string, output []byte) ([]byte, error) {
	if turnID == "" {
		return nil, errors.New("ledger/sqlite: commit turn: empty turn id")
	}
	if output == nil {
		output = []byte{}
	}
	if _, err := s.w.ExecContext(ctx, "INSERT OR IGNORE INTO turns (turn_id, output, created_at) VALUES (?, ?, ?)",
		turnID, output, toNanos(s.now().UTC())); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: commit turn %s: %w", turnID, err)
	}
	var stored []byte
	if err := s.w.QueryRowContext(ctx, "SELECT output FROM turns WHERE turn_id = ?", turnID).Scan(&stored); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: read committed turn %s: %w", turnID, err)
	}
	return nonNil(stored), nil
}

// GetTurn implements ledger.Store.
func (s *Store) GetTurn(ctx context.Context, turnID string) ([]byte, error) {
	var out []byte
	err := s.r.QueryRowContext(ctx, "SELECT output FROM turns WHERE turn_id = ?", turnID).Scan(&out)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("ledger/sqlite: get turn %s: %w", turnID, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: get turn %s: %w", turnID, err)
	}
	return nonNil(out), nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
