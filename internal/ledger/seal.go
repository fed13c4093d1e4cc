package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sealer encrypts what the ledger stores of a task's contents
// (internal/codec, CAPSTAN_CODEC_KEYS): transcript items, turn outputs
// and operation results. Open returns a value Seal did not write as it is
// (a row written before keys were set), and refuses one it cannot decrypt.
type Sealer interface {
	Seal(plain []byte) ([]byte, error)
	Open(stored []byte) ([]byte, error)
}

// ErrUndecryptable: a stored value could not be decrypted (its key is not
// listed, or it was altered). It is the ledger's answer, not an outage:
// asking again gets the same one.
var ErrUndecryptable = errors.New("ledger: stored value cannot be decrypted")

// SealItem is what a store writes for item data: its reference, the
// content address of the plaintext (so references, which workflows compute
// and history records, do not change with encryption, and equal items
// still share a row), and the bytes to store. A nil s stores data as it is.
func SealItem(s Sealer, data []byte) (ref string, stored []byte, err error) {
	if data == nil {
		data = []byte{}
	}
	ref = ItemRef(data)
	if s == nil {
		return ref, data, nil
	}
	stored, err = s.Seal(data)
	if err != nil {
		return "", nil, fmt.Errorf("encrypt item %s: %w", ref, err)
	}
	return ref, stored, nil
}

// OpenItem is an item's plaintext from the bytes stored under ref:
// decrypted (a nil s leaves them as they are), then checked against ref
// (CheckItem).
func OpenItem(s Sealer, ref string, stored []byte) ([]byte, error) {
	data := stored
	if s != nil {
		var err error
		if data, err = s.Open(stored); err != nil {
			return nil, fmt.Errorf("decrypt item %s: %w", ref, errors.Join(ErrUndecryptable, err))
		}
	}
	if err := CheckItem(ref, data); err != nil {
		return nil, err
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// Sealed is store with the results of its operations and the outputs of
// its turns encrypted by s; items are the store's own to seal (SealItem,
// OpenItem), since their references name the plaintext. Every other
// column — identifiers, states, fences, facts, error texts — stays as the
// store keeps it.
func Sealed(store Store, s Sealer) Store {
	return &sealedStore{Store: store, s: s}
}

type sealedStore struct {
	Store
	s Sealer
}

func (st *sealedStore) seal(b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return st.s.Seal(b)
}

func (st *sealedStore) open(b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return st.s.Open(b)
}

func (st *sealedStore) openOp(op Operation, err error) (Operation, error) {
	if op.Result == nil {
		return op, err
	}
	plain, oerr := st.open(op.Result)
	if oerr != nil {
		return op, fmt.Errorf("ledger: decrypt the result of operation %s: %w", op.ID, errors.Join(ErrUndecryptable, oerr))
	}
	op.Result = plain
	return op, err
}

func (st *sealedStore) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	var err error
	if req.Op.Result, err = st.seal(req.Op.Result); err != nil {
		return ClaimResult{}, fmt.Errorf("ledger: encrypt the result of operation %s: %w", req.Op.ID, err)
	}
	res, err := st.Store.Claim(ctx, req)
	res.Op, err = st.openOp(res.Op, err)
	return res, err
}

func (st *sealedStore) Complete(ctx context.Context, c Completion) error {
	var err error
	if c.Result, err = st.seal(c.Result); err != nil {
		return fmt.Errorf("ledger: encrypt the result of operation %s: %w", c.ID, err)
	}
	return st.Store.Complete(ctx, c)
}

func (st *sealedStore) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (Operation, error) {
	return st.openOp(st.Store.TakeForReconcile(ctx, id, owner, lease))
}

func (st *sealedStore) Get(ctx context.Context, id string) (Operation, error) {
	return st.openOp(st.Store.Get(ctx, id))
}

func (st *sealedStore) ListByTask(ctx context.Context, taskID string) ([]Operation, error) {
	ops, err := st.Store.ListByTask(ctx, taskID)
	for i := range ops {
		var oerr error
		if ops[i], oerr = st.openOp(ops[i], nil); oerr != nil {
			return nil, oerr
		}
	}
	return ops, err
}

func (st *sealedStore) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error) {
	if output == nil {
		output = []byte{}
	}
	sealed, err := st.s.Seal(output)
	if err != nil {
		return nil, fmt.Errorf("ledger: encrypt the output of turn %s: %w", turnID, err)
	}
	stored, err := st.Store.CommitTurn(ctx, turnID, sealed, items...)
	if err != nil {
		return nil, err
	}
	return st.openTurn(turnID, stored)
}

func (st *sealedStore) GetTurn(ctx context.Context, turnID string) ([]byte, error) {
	stored, err := st.Store.GetTurn(ctx, turnID)
	if err != nil {
		return nil, err
	}
	return st.openTurn(turnID, stored)
}

func (st *sealedStore) openTurn(turnID string, stored []byte) ([]byte, error) {
	out, err := st.s.Open(stored)
	if err != nil {
		return nil, fmt.Errorf("ledger: decrypt the output of turn %s: %w", turnID, errors.Join(ErrUndecryptable, err))
	}
	return out, nil
}
