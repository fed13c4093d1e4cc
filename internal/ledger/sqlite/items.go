package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// PutItem implements ledger.Store. Storing bytes that are already present is
// a no-op that returns the same reference.
func (s *Store) PutItem(ctx context.Context, data []byte) (string, error) {
	if data == nil {
		data = []byte{}
	}
	ref := ledger.ItemRef(data)
	// The chain is recorded as it is by a turn commit, so that an item a
	// late attempt writes after retention removed its chain makes the
	// chain known again, and the next retention collects it.
	now := s.now().UTC()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.upsertChain(ctx, tx, ledger.ScopeOf(ctx), now); err != nil {
			return err
		}
		return s.putItems(ctx, tx, [][]byte{data}, now)
	})
	if err != nil {
		return "", unavailable(fmt.Errorf("ledger/sqlite: put item %s (%d bytes): %w", ref, len(data), err))
	}
	return ref, nil
}

// putItems inserts items in tx, as PutItem would, each stamped now, and
// records that the chain of ctx's scope refers to them (” for none).
func (s *Store) putItems(ctx context.Context, tx *sql.Tx, items [][]byte, now time.Time) error {
	scope := ledger.ScopeOf(ctx).Token
	for _, plain := range items {
		ref, data, err := ledger.SealItem(s.sealer, plain)
		if err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, sqlInsertItem, ref, data, len(data), toNanos(now)); err != nil {
			return fmt.Errorf("put item %s (%d bytes): %w", ref, len(data), err)
		}
		if _, err := s.exec(ctx, tx, sqlInsertItemRef, ref, scope); err != nil {
			return fmt.Errorf("record the owner of item %s: %w", ref, err)
		}
	}
	return nil
}

// GetItem implements ledger.Store. A malformed reference is an error that is
// not ErrNotFound; stored bytes that no longer match their reference are
// reported as corrupt rather than returned.
func (s *Store) GetItem(ctx context.Context, ref string) ([]byte, error) {
	if err := ledger.CheckItemRef(ref); err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: get item: %w", err))
	}
	var data []byte
	err := s.queryRow(ctx, sqlGetItem, ref).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("ledger/sqlite: get item %s: %w", ref, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable(fmt.Errorf("ledger/sqlite: get item %s: %w", ref, err))
	}
	return s.openItem(ref, data)
}

// getItemsBatch is how many references one GetItems query asks for: well
// under SQLite's limit on a statement's parameters.
const getItemsBatch = 500

// GetItems implements ledger.Store.
func (s *Store) GetItems(ctx context.Context, refs []string) ([][]byte, error) {
	found := make(map[string][]byte, len(refs))
	for start := 0; start < len(refs); start += getItemsBatch {
		batch := refs[start:min(start+getItemsBatch, len(refs))]
		args := make([]any, len(batch))
		for i, ref := range batch {
			if err := ledger.CheckItemRef(ref); err != nil {
				return nil, unavailable(fmt.Errorf("ledger/sqlite: get items: %w", err))
			}
			args[i] = ref
		}
		q := "SELECT ref, data FROM items WHERE ref IN (?" + strings.Repeat(", ?", len(batch)-1) + ")"
		if err := s.scanItems(ctx, q, args, found); err != nil {
			return nil, err
		}
	}
	return ledger.ItemsInOrder(refs, found, "ledger/sqlite")
}

func (s *Store) scanItems(ctx context.Context, q string, args []any, found map[string][]byte) error {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: get items: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var ref string
		var data []byte
		if err := rows.Scan(&ref, &data); err != nil {
			return unavailable(fmt.Errorf("ledger/sqlite: get items: %w", err))
		}
		plain, err := s.openItem(ref, data)
		if err != nil {
			return err
		}
		found[ref] = plain
	}
	if err := rows.Err(); err != nil {
		return unavailable(fmt.Errorf("ledger/sqlite: get items: %w", err))
	}
	return nil
}

// openItem is the plaintext of the bytes stored under ref
// (ledger.OpenItem): one that cannot be decrypted is that answer; one that
// does not match its reference is reported as the ledger failing to read.
func (s *Store) openItem(ref string, stored []byte) ([]byte, error) {
	data, err := ledger.OpenItem(s.sealer, ref, stored)
	switch {
	case errors.Is(err, ledger.ErrUndecryptable):
		return nil, fmt.Errorf("ledger/sqlite: get item %s: %w", ref, err)
	case err != nil:
		return nil, unavailable(fmt.Errorf("ledger/sqlite: get item %s: %w", ref, err))
	}
	return data, nil
}
