package ledgertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
)

// SealedOpener opens a store on the database named where, its contents
// sealed by s (nil: plain), and returns it with dump, which reads every
// stored item, turn output and operation result as the database holds
// them, bypassing the store.
type SealedOpener func(t *testing.T, where string, now func() time.Time, s ledger.Sealer) (st ledger.Store, dump func() []byte)

// NewKeys is codec keys of the given ids, each a fresh random key, in
// order (the first encrypts).
func NewKeys(t testing.TB, ids ...string) (*codec.Keys, []config.CodecKey) {
	t.Helper()
	var list []config.CodecKey
	for _, id := range ids {
		secret := make([]byte, 32)
		_, _ = rand.Read(secret)
		list = append(list, config.CodecKey{ID: id, Secret: secret})
	}
	k, err := codec.New(list)
	if err != nil {
		t.Fatal(err)
	}
	return k, list
}

// RunSealed runs the contract suite over a sealed store, then checks
// what sealing promises: no plaintext of an item, turn output or result in
// the database; a rotation (new key first, old after) reads what the old
// key sealed; rows written plain stay readable; a key not listed is
// ErrUndecryptable naming it. fresh names a new, empty database.
func RunSealed(t *testing.T, fresh func(t *testing.T) string, open SealedOpener) {
	t.Helper()
	old, oldList := NewKeys(t, "key-2026-01")
	t.Run("Contract", func(t *testing.T) {
		run(t, func(t *testing.T, now func() time.Time) ledger.Store {
			st, _ := open(t, fresh(t), now, codec.Sealer(old))
			return st
		}, true)
	})
	t.Run("RotationPlaintextAndMissingKey", func(t *testing.T) {
		ctx := context.Background()
		clock := NewClock(Epoch)
		where := fresh(t)
		// Rows written before keys were set.
		plainStore, _ := open(t, where, clock.Now, nil)
		plainRef := putSecret(t, ctx, plainStore, "plain", clock)
		st, dump := open(t, where, clock.Now, codec.Sealer(old))
		oldRef := putSecret(t, ctx, st, "old", clock)
		for _, secret := range []string{"item-old", "result-old", "turn-old", "completion-item-old"} {
			if bytes.Contains(dump(), []byte(secret)) {
				t.Fatalf("the database holds %q in plaintext", secret)
			}
		}
		checkSecret(t, ctx, st, "plain", plainRef)
		checkSecret(t, ctx, st, "old", oldRef)

		// Rotation: a new key first, the old one after.
		_, newList := NewKeys(t, "key-2026-12")
		rotated, err := codec.New(append(newList, oldList...))
		if err != nil {
			t.Fatal(err)
		}
		rs, dump := open(t, where, clock.Now, codec.Sealer(rotated))
		newRef := putSecret(t, ctx, rs, "new", clock)
		for _, tag := range []string{"plain", "old", "new"} {
			checkSecret(t, ctx, rs, tag, map[string]string{"plain": plainRef, "old": oldRef, "new": newRef}[tag])
		}
		if bytes.Contains(dump(), []byte("item-new")) {
			t.Fatal("the database holds item-new in plaintext")
		}

		// The old key gone: one error naming it.
		gone, err := codec.New(newList)
		if err != nil {
			t.Fatal(err)
		}
		gs, _ := open(t, where, clock.Now, codec.Sealer(gone))
		_, err = gs.GetItem(ctx, oldRef)
		if !errors.Is(err, ledger.ErrUndecryptable) || !errors.Is(err, codec.ErrUnknownKey) || !strings.Contains(err.Error(), `"key-2026-01"`) {
			t.Fatalf("GetItem of an item sealed with a key no longer listed: %v; want ErrUndecryptable and ErrUnknownKey naming key-2026-01", err)
		}
		if errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("a missing key is reported as an outage: %v", err)
		}
		if _, err := gs.GetTurn(ctx, "turn-old"); !errors.Is(err, codec.ErrUnknownKey) {
			t.Fatalf("GetTurn sealed with a missing key: %v; want ErrUnknownKey", err)
		}
		if _, err := gs.Get(ctx, "op-old"); !errors.Is(err, codec.ErrUnknownKey) {
			t.Fatalf("Get of a result sealed with a missing key: %v; want ErrUnknownKey", err)
		}
		// Without any key, a sealed item is the same refusal, not ciphertext.
		ns, _ := open(t, where, clock.Now, codec.Sealer(nil))
		if _, err := ns.GetItem(ctx, newRef); !errors.Is(err, codec.ErrUnknownKey) {
			t.Fatalf("GetItem of a sealed item without keys: %v; want ErrUnknownKey", err)
		}
	})
}

// putSecret writes, tagged, an item, an operation whose completion has a
// result and an item, and a turn with an output and an item; it returns
// the item's reference.
func putSecret(t *testing.T, ctx context.Context, st ledger.Store, tag string, clock *Clock) string {
	t.Helper()
	ref, err := st.PutItem(ctx, []byte(`{"text":"item-`+tag+`"}`))
	if err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	op := newOp("op-"+tag, "task-"+tag)
	res, err := st.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: "w/1", Lease: Lease})
	if err != nil || res.Status != ledger.Claimed {
		t.Fatalf("Claim: %v, %v", res.Status, err)
	}
	if err := st.Complete(ctx, ledger.Completion{ID: op.ID, Fence: res.Op.Fence, State: capstan.OutcomeSucceeded,
		Result: []byte(`{"body":"result-` + tag + `"}`), Items: [][]byte{[]byte(`{"text":"completion-item-` + tag + `"}`)}}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	out, err := st.CommitTurn(ctx, "turn-"+tag, []byte(`{"text":"turn-`+tag+`"}`), []byte(`{"text":"turn-item-`+tag+`"}`))
	if err != nil || !bytes.Contains(out, []byte("turn-"+tag)) {
		t.Fatalf("CommitTurn: %q, %v", out, err)
	}
	clock.Advance(time.Second)
	return ref
}

// checkSecret reads back what putSecret wrote under tag.
func checkSecret(t *testing.T, ctx context.Context, st ledger.Store, tag, ref string) {
	t.Helper()
	items, err := st.GetItems(ctx, []string{ref, ledger.ItemRef([]byte(`{"text":"completion-item-` + tag + `"}`)), ledger.ItemRef([]byte(`{"text":"turn-item-` + tag + `"}`))})
	if err != nil || !bytes.Contains(items[0], []byte("item-"+tag)) || !bytes.Contains(items[2], []byte("turn-item-"+tag)) {
		t.Fatalf("GetItems of %s: %q, %v", tag, items, err)
	}
	op, err := st.Get(ctx, "op-"+tag)
	if err != nil || !bytes.Contains(op.Result, []byte("result-"+tag)) {
		t.Fatalf("Get(op-%s): result %q, %v", tag, op.Result, err)
	}
	ops, err := st.ListByTask(ctx, "task-"+tag)
	if err != nil || len(ops) != 1 || !bytes.Equal(ops[0].Result, op.Result) {
		t.Fatalf("ListByTask(task-%s): %v, %v", tag, ops, err)
	}
	out, err := st.GetTurn(ctx, "turn-"+tag)
	if err != nil || string(out) != `{"text":"turn-`+tag+`"}` {
		t.Fatalf("GetTurn(turn-%s): %q, %v", tag, out, err)
	}
}
