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
	b := &pgx.Batch{}
	// The chain is recorded as it is by a turn commit, so that an item a
	// late attempt writes after retention removed its chain makes the
	// chain known again, and the next retention collects it.
	now := s.nowArg()
	queueChain(b, ledger.ScopeOf(ctx), now)
	if err := s.queueItems(ctx, b, [][]byte{data}, now); err != nil {
		return "", fmt.Errorf("ledger/postgres: put item %s: %w", ref, err)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return "", unavailable(fmt.Errorf("ledger/postgres: put item %s (%d bytes): %w", ref, len(data), err))
	}
	return ref, nil
}

// itemLock is the first key of the advisory lock that keeps retention from
// deleting an item a writer is making someone's again ("capi" in ASCII);
// the second, as for migrationLock, is a hash of the ledger's schema.
// Item writers hold it shared for their transaction, RemoveChain
// exclusively.
const itemLock int32 = 0x63617069

// queueItems queues on b the inserts of items, as PutItem would make them,
// each stamped now (a time the database's clock gave, or nil for the
// database's clock as the insert runs: see dbNow), and of their ownership
// by the chain of ctx's scope ("" for none), behind the item lock held
// shared. b must run as one transaction (a batch or inside one), which
// holds the lock.
// Items are sealed (ledger.SealItem) before they are queued; a sealer's
// failure queues nothing more and is returned.
func (s *Store) queueItems(ctx context.Context, b *pgx.Batch, items [][]byte, now any) error {
	if len(items) == 0 {
		return nil
	}
	scope := ledger.ScopeOf(ctx).Token
	b.Queue("SELECT pg_advisory_xact_lock_shared($1, hashtext(coalesce(current_schema(), '')))", itemLock)
	for _, plain := range items {
		ref, data, err := ledger.SealItem(s.sealer, plain)
		if err != nil {
			return err
		}
		b.Queue("INSERT INTO items (ref, data, size, created_at) VALUES ($1, $2, $3, "+dbNow(4)+") ON CONFLICT (ref) DO NOTHING",
			ref, data, len(data), now)
		b.Queue("INSERT INTO item_refs (ref, scope) VALUES ($1, $2) ON CONFLICT DO NOTHING", ref, scope)
	}
	return nil
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
	return s.openItem(ref, data)
}

// GetItems implements ledger.Store: one query for every reference.
func (s *Store) GetItems(ctx context.Context, refs []string) ([][]byte, error) {
	for _, ref := range refs {
		if err := ledger.CheckItemRef(ref); err != nil {
			return nil, unavailable(fmt.Errorf("ledger/postgres: get items: %w", err))
		}
	}
	found := make(map[string][]byte, len(refs))
	if len(refs) > 0 {
		rows, err := s.pool.Query(ctx, "SELECT ref, data FROM items WHERE ref = ANY($1)", refs)
		if err != nil {
			return nil, unavailable(fmt.Errorf("ledger/postgres: get items: %w", err))
		}
		defer rows.Close()
		for rows.Next() {
			var ref string
			var data []byte
			if err := rows.Scan(&ref, &data); err != nil {
				return nil, unavailable(fmt.Errorf("ledger/postgres: get items: %w", err))
			}
			plain, err := s.openItem(ref, data)
			if err != nil {
				return nil, err
			}
			found[ref] = plain
		}
		if err := rows.Err(); err != nil {
			return nil, unavailable(fmt.Errorf("ledger/postgres: get items: %w", err))
		}
	}
	return ledger.ItemsInOrder(refs, found, "ledger/postgres")
}

// openItem is the plaintext of the bytes stored under ref
// (ledger.OpenItem): one that cannot be decrypted is that answer; one that
// does not match its reference is reported as the ledger failing to read.
func (s *Store) openItem(ref string, stored []byte) ([]byte, error) {
	data, err := ledger.OpenItem(s.sealer, ref, stored)
	switch {
	case errors.Is(err, ledger.ErrUndecryptable):
		return nil, fmt.Errorf("ledger/postgres: get item %s: %w", ref, err)
	case err != nil:
		return nil, unavailable(fmt.Errorf("ledger/postgres: get item %s: %w", ref, err))
	}
	return data, nil
}
