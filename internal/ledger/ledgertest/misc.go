package ledgertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/ledger"
)

// ListByTask returns only the task's operations, by creation time and then
// id, whatever order they were claimed in and whatever happened since.
func testListByTask(h *h) {
	if ops, err := h.s.ListByTask(h.ctx, "task-empty"); err != nil || len(ops) != 0 {
		h.Fatalf("ListByTask of a task without operations: %v, %v; want none", ops, err)
	}
	claim := func(id, task string) ledger.Operation {
		h.Helper()
		return h.claim("worker-a/1", newOp(id, task))
	}
	// Same instant, claimed in reverse id order.
	claim("op-c", "task-1")
	claim("op-b", "task-1")
	claim("op-x", "task-2")
	h.clock.Advance(time.Millisecond)
	claim("op-a", "task-1") // later, though first by id
	h.clock.Advance(time.Second)
	late := claim("op-0", "task-1")
	h.succeed(late, "e", []byte("r")) // updates must not reorder
	// Touch an early one last.
	if err := h.s.Release(h.ctx, "op-c", 1); err != nil {
		h.Fatal(err)
	}

	ops, err := h.s.ListByTask(h.ctx, "task-1")
	if err != nil {
		h.Fatalf("ListByTask: %v", err)
	}
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
		if d := diff(op, h.get(op.ID)); d != "" {
			h.Errorf("ListByTask row %s differs from Get: %s", op.ID, d)
		}
	}
	if got, want := strings.Join(ids, ","), "op-b,op-c,op-a,op-0"; got != want {
		h.Fatalf("ListByTask order %s, want %s", got, want)
	}
	if ops, err := h.s.ListByTask(h.ctx, "task-2"); err != nil || len(ops) != 1 || ops[0].ID != "op-x" {
		h.Fatalf("ListByTask(task-2) = %v, %v; want [op-x]", ops, err)
	}
}

// Items are content-addressed: equal bytes give one reference, the reference
// is sha256 of the bytes, and the bytes come back intact.
func testItems(h *h) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for _, data := range [][]byte{
		[]byte(`{"role":"assistant","content":"hello"}`),
		{0, 1, 2, 255, 0},
		{},
		big,
	} {
		sum := sha256.Sum256(data)
		want := "sha256:" + hex.EncodeToString(sum[:])
		ref, err := h.s.PutItem(h.ctx, data)
		if err != nil {
			h.Fatalf("PutItem(%d bytes): %v", len(data), err)
		}
		if ref != want {
			h.Fatalf("PutItem ref %s, want %s", ref, want)
		}
		again, err := h.s.PutItem(h.ctx, bytes.Clone(data))
		if err != nil || again != ref {
			h.Fatalf("PutItem of equal bytes: %s, %v; want %s", again, err, ref)
		}
		got, err := h.s.GetItem(h.ctx, ref)
		if err != nil {
			h.Fatalf("GetItem(%s): %v", ref, err)
		}
		if !bytes.Equal(got, data) {
			h.Fatalf("GetItem(%s) returned %d bytes, want the %d stored", ref, len(got), len(data))
		}
	}
	a, _ := h.s.PutItem(h.ctx, []byte("a"))
	b, _ := h.s.PutItem(h.ctx, []byte("b"))
	if a == b {
		h.Fatalf("different bytes share the reference %s", a)
	}
	// nil stores the empty item.
	if ref, err := h.s.PutItem(h.ctx, nil); err != nil || ref != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		h.Fatalf("PutItem(nil) = %s, %v; want the empty item's reference", ref, err)
	}
}

// GetItem tells a missing item (ErrNotFound) from a malformed reference (an
// error that is not ErrNotFound).
func testItemRefValidation(h *h) {
	missing := "sha256:" + strings.Repeat("ab", 32)
	_, err := h.s.GetItem(h.ctx, missing)
	h.expectErrIs("GetItem of a missing item", err, ledger.ErrNotFound, "")
	ref, _ := h.s.PutItem(h.ctx, []byte("x"))
	for _, bad := range []string{
		"",
		"x",
		strings.TrimPrefix(ref, "sha256:"),
		"md5:" + strings.TrimPrefix(ref, "sha256:"),
		ref[:len(ref)-1],
		ref + "0",
		strings.ToUpper(ref[:7]) + ref[7:],
		"sha256:" + strings.ToUpper(strings.TrimPrefix(ref, "sha256:")),
		"sha256:" + strings.Repeat("zz", 32),
	} {
		_, err := h.s.GetItem(h.ctx, bad)
		if err == nil || errors.Is(err, ledger.ErrNotFound) {
			h.Errorf("GetItem(%q) = %v, want a malformed-reference error", bad, err)
		}
	}
}

// GetItems returns many items in one call, in the order asked, repeats
// included; a missing one is ErrNotFound naming it, a malformed reference
// an error that is not.
func testGetItems(h *h) {
	var refs []string
	var want [][]byte
	for i := range 1200 { // more than one batch of a store that batches
		data := fmt.Appendf(nil, `{"n":%d}`, i)
		if i == 7 {
			data = []byte{}
		}
		ref, err := h.s.PutItem(h.ctx, data)
		if err != nil {
			h.Fatalf("PutItem: %v", err)
		}
		refs, want = append(refs, ref), append(want, data)
	}
	refs, want = append(refs, refs[3], refs[0]), append(want, want[3], want[0])
	got, err := h.s.GetItems(h.ctx, refs)
	if err != nil {
		h.Fatalf("GetItems(%d refs): %v", len(refs), err)
	}
	if len(got) != len(want) {
		h.Fatalf("GetItems returned %d items, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) || got[i] == nil {
			h.Fatalf("GetItems item %d = %q, want %q", i, got[i], want[i])
		}
	}
	if got, err := h.s.GetItems(h.ctx, nil); err != nil || len(got) != 0 {
		h.Fatalf("GetItems(nil) = %v, %v; want none", got, err)
	}
	missing := "sha256:" + strings.Repeat("cd", 32)
	_, err = h.s.GetItems(h.ctx, []string{refs[0], missing, refs[1]})
	h.expectErrIs("GetItems with a missing item", err, ledger.ErrNotFound, missing)
	if _, err := h.s.GetItems(h.ctx, []string{refs[0], "sha256:zz"}); err == nil || errors.Is(err, ledger.ErrNotFound) {
		h.Errorf("GetItems with a malformed reference = %v, want a malformed-reference error", err)
	}
}
