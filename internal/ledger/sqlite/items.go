package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/ledger"
)

const refPrefix = "sha256:"

// itemRef is the content address of data.
func itemRef(data []byte) string {
	sum := sha256.Sum256(data)
	return refPrefix + hex.EncodeToString(sum[:])
}

// checkRef reports whether ref is "sha256:" followed by 64 lowercase hex
// digits, the only form PutItem produces.
func checkRef(ref string) error {
	h, ok := strings.CutPrefix(ref, refPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return fmt.Errorf("malformed item reference %q, want sha256:<64 hex digits>", ref)
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("malformed item reference %q, want sha256:<64 lowercase hex digits>", ref)
		}
	}
	return nil
}

// PutItem implements ledger.Store. Storing bytes that are already present is
// a no-op that returns the same reference.
func (s *Store) PutItem(ctx context.Context, data []byte) (string, error) {
	if data == nil {
		data = []byte{}
	}
	ref := itemRef(data)
	_, err := s.w.ExecContext(ctx,
		"INSERT OR IGNORE INTO items (ref, data, size, created_at) VALUES (?, ?, ?, ?)",
		ref, data, len(data), toNanos(s.now().UTC()))
	if err != nil {
		return "", fmt.Errorf("ledger/sqlite: put item %s (%d bytes): %w", ref, len(data), err)
	}
	return ref, nil
}

// GetItem implements ledger.Store. A malformed reference is an error that is
// not ErrNotFound; stored bytes that no longer match their reference are
// reported as corrupt rather than returned.
func (s *Store) GetItem(ctx context.Context, ref string) ([]byte, error) {
	if err := checkRef(ref); err != nil {
		return nil, fmt.Errorf("ledger/sqlite: get item: %w", err)
	}
	var data []byte
	err := s.r.QueryRowContext(ctx, "SELECT data FROM items WHERE ref = ?", ref).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("ledger/sqlite: get item %s: %w", ref, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger/sqlite: get item %s: %w", ref, err)
	}
	if got := itemRef(data); got != ref {
		return nil, fmt.Errorf("ledger/sqlite: get item %s: stored bytes are corrupt (they hash to %s)", ref, got)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}
