package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/ledger"
)

// BenchmarkCommitTurnPages counts the pages a CommitTurn of four new items
// writes to the WAL, the bench demo task's turn, with and without the
// chain's scope in the context (a scope adds the tasks row's upsert and
// item ownership under the chain's token). The tables first hold 2,000
// turns; automatic checkpoints are off while it counts, so every frame
// written stays in the WAL. It reports pages/commit; what a commit costs
// in fsync and _walFrames CPU follows it.
//
//	go test -run '^$' -bench CommitTurnPages ./internal/ledger/sqlite/
func BenchmarkCommitTurnPages(b *testing.B) {
	for _, scoped := range []bool{false, true} {
		b.Run(fmt.Sprintf("scoped=%v", scoped), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "ledger.db")
			s, err := Open(context.Background(), path, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			commit := func(prefix string, i int) {
				ctx := context.Background()
				if scoped {
					ctx = ledger.WithScope(ctx, ledger.Scope{Token: fmt.Sprintf("~%s%011x", prefix, i/4),
						Namespace: "default", WorkflowID: fmt.Sprintf("wf-%s-%d", prefix, i/4), RunID: "run", TaskID: fmt.Sprintf("t-%s-%d", prefix, i/4)})
				}
				items := make([][]byte, 4)
				for k := range items {
					items[k] = fmt.Appendf(nil, "item %s %d %d: a transcript item of a few dozen bytes", prefix, i, k)
				}
				if _, err := s.CommitTurn(ctx, fmt.Sprintf("turn-%s-%d", prefix, i), make([]byte, 300), items...); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 2000 {
				commit("0", i)
			}
			for _, p := range []string{"PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA wal_autocheckpoint = 0"} {
				if _, err := s.w.Exec(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				commit("1", i)
			}
			b.StopTimer()
			fi, err := os.Stat(path + "-wal")
			if err != nil {
				b.Fatal(err)
			}
			var pageSize int64
			if err := s.w.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
				b.Fatal(err)
			}
			const walHeader, frameHeader = 32, 24
			frames := (fi.Size() - walHeader) / (pageSize + frameHeader)
			b.ReportMetric(float64(frames)/float64(b.N), "pages/commit")
		})
	}
}
