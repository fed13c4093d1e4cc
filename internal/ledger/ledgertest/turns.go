package ledgertest

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/ledger"
)

// A turn commits once: a second commit of the same turn id gets the first
// output back and changes nothing; GetTurn tells a missing turn.
func testTurnCommitsOnce(h *h) {
	if _, err := h.s.GetTurn(h.ctx, "T/t1"); !errors.Is(err, ledger.ErrNotFound) {
		h.Fatalf("GetTurn of an uncommitted turn: %v, want ErrNotFound", err)
	}
	first := []byte(`{"text":"first","tool_calls":[{"id":"c1"}]}`)
	got, err := h.s.CommitTurn(h.ctx, "T/t1", first)
	if err != nil || !bytes.Equal(got, first) {
		h.Fatalf("first CommitTurn = %q, %v; want the output back", got, err)
	}
	got, err = h.s.CommitTurn(h.ctx, "T/t1", []byte(`{"text":"a re-sampled answer"}`))
	if err != nil || !bytes.Equal(got, first) {
		h.Fatalf("second CommitTurn = %q, %v; want the first output %q", got, err, first)
	}
	if got, err := h.s.GetTurn(h.ctx, "T/t1"); err != nil || !bytes.Equal(got, first) {
		h.Fatalf("GetTurn = %q, %v; want %q", got, err, first)
	}
	if got, err := h.s.CommitTurn(h.ctx, "T/t2", []byte("second turn")); err != nil || string(got) != "second turn" {
		h.Fatalf("CommitTurn of another turn = %q, %v", got, err)
	}
	if _, err := h.s.CommitTurn(h.ctx, "", []byte("x")); err == nil {
		h.Fatal("CommitTurn with an empty turn id succeeded")
	}
}

// 16 attempts commit the same turn at once with different outputs: all get
// one and the same output back, one of theirs.
func testConcurrentTurnCommits(h *h) {
	const n = 16
	got := make([][]byte, n)
	err := race(n, func(i int) error {
		out, err := h.s.CommitTurn(h.ctx, "T/t9", fmt.Appendf(nil, "attempt %d", i))
		got[i] = out
		return err
	})
	if err != nil {
		h.Fatal(err)
	}
	for i := range got {
		if !bytes.Equal(got[i], got[0]) {
			h.Fatalf("attempt %d got %q, attempt 0 got %q: two outputs committed for one turn", i, got[i], got[0])
		}
	}
	if !bytes.HasPrefix(got[0], []byte("attempt ")) {
		h.Fatalf("committed output %q is none of the attempts'", got[0])
	}
}
