package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
)

// TestUnreachableServerIsUnavailable: a ledger whose connection to its
// server is cut, and whose new connections fail, answers every call with
// an error that is ledger.ErrUnavailable (the caller may wait and ask
// again); the ledger's own answers — not found, a conflict — never are,
// before the cut or after the link is back.
func TestUnreachableServerIsUnavailable(t *testing.T) {
	t.Parallel()
	link, dsn := pgtest.NewLink(t, pgtest.NewLedger(t))
	s := open(t, dsn, time.Now)
	ctx := context.Background()
	req := ledger.ClaimRequest{Op: ledger.Operation{ID: "op-1", Kind: "k", RequestHash: "h1"}, Owner: "w", Lease: time.Minute}
	if _, err := s.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	logical := func(what string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) || errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s: %v, want %v and not ErrUnavailable", what, err, want)
		}
	}
	logical("Get of an unknown id", func() error { _, err := s.Get(ctx, "nope"); return err }(), ledger.ErrNotFound)
	other := req
	other.Op.RequestHash = "h2"
	logical("Claim with another request", func() error { _, err := s.Claim(ctx, other); return err }(), ledger.ErrConflict)

	link.Down()
	for what, call := range map[string]func() error{
		"Get":      func() error { _, err := s.Get(ctx, "op-1"); return err },
		"Claim":    func() error { _, err := s.Claim(ctx, req); return err },
		"Complete": func() error { return s.Complete(ctx, ledger.Completion{ID: "op-1", Fence: 1, State: "succeeded"}) },
		"GetTurn":  func() error { _, err := s.GetTurn(ctx, "T/t1"); return err },
		"PutItem":  func() error { _, err := s.PutItem(ctx, []byte("x")); return err },
	} {
		if err := call(); !errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s with the server unreachable: %v, want ErrUnavailable", what, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(cctx, "op-1"); err == nil || errors.Is(err, ledger.ErrUnavailable) {
		t.Errorf("Get under a cancelled context: %v, want an error that is not ErrUnavailable (the caller gave up)", err)
	}

	link.Up()
	logical("Get of an unknown id, the link back", func() error { _, err := s.Get(ctx, "nope"); return err }(), ledger.ErrNotFound)
}
