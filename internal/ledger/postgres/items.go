package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/capstanhq/capstan/internal/ledger"
)

// PutItem implements ledger.Store. Storing bytes that are already present is
// a no-op that returns the same reference.
func (s *Store) PutItem(ctx context.Context, data []byte) (string, error) {
	if data == nil {
		data = []byte{}
	}
	ref := ledger.ItemRef(data)
	_, err := s.pool.Exec(ctx,
		"INSERT INTO items (ref, data, size, created_at) VALUES ($1, $2, $3, "+dbNow(4)+") ON CONFLICT (ref) DO NOTHING",
		ref, data, len(data), s.nowArg())
	if err != nil {
		return "", unavailable(fmt.Errorf("ledger/postgres: put item %s (%d bytes): %w", ref, len(data), err))
	}
	return ref, nil
}

// queueItems queues on b the inserts of items, as PutItem would make them,
// each stamped now: a time the database's clock gave, or nil for the
// database's clock as the insert runs (see dbNow).
func queueItems(b *pgx.Batch, items [][]byte, now any) {
	for _, data := range items {
		if data == nil {
			data = []byte{}
		}
		b.Queue("INSERT INTO items (ref, data, size, created_at) VALUES ($1, $2, $3, "+dbNow(4)+") ON CONFLICT (ref) DO NOTHING",
			ledger.ItemRef(data), data, len(data), now)
	}
}

// GetItem implements ledger.Store. A malformed reference is an error that is
// not ErrNotFound; stored bytes that no longer match their reference are
// reported as corrupt rather than returned.
func (s *Store) GetItem(ctx context.Context, ref string) ([]byte, error) {
	if err := ledger.CheckItemRef(ref); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: get item: %w", err))
	}
	var data []byte
	err := s.pool.QueryRow(ctx, "SELECT data FROM items WHERE ref = $1", ref).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("ledger/postgres: get item %s: %w", ref, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: get item %s: %w", ref, err))
	}
	if err := ledger.CheckItem(ref, data); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/postgres: get item %s: %w", ref, err))
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}
