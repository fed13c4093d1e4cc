//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// BenchmarkOneFileOneOrTwoStores measures what sharing the file costs in
// CPU: ten writers, each pausing 1 ms before every CommitTurn, on one
// Store or split over two Stores of the same file (two workers of the
// bench's two-worker pool). It reports this process's CPU time (user and
// system) per write. Two Stores cost more because each commits its own
// groups (about twice the fsyncs for the same writes) and because a write
// by one Store empties the other's page cache, which then reads its pages
// again (about fourteen times the preads: strace, 2026-12-03).
func BenchmarkOneFileOneOrTwoStores(b *testing.B) {
	for _, stores := range []int{1, 2} {
		b.Run(fmt.Sprintf("stores=%d", stores), func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "ledger.db")
			ss := openStores(b, path, stores, sqlite.Options{})
			var (
				next atomic.Int64
				wg   sync.WaitGroup
				fail atomic.Value
			)
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := range 10 {
				s := ss[i%stores]
				wg.Go(func() {
					for n := 0; next.Add(1) <= int64(b.N); n++ {
						time.Sleep(time.Millisecond)
						id := fmt.Sprintf("turn-%d-%d", i, n)
						if _, err := s.CommitTurn(ctx, id, []byte(id), []byte("item "+id)); err != nil {
							fail.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			cpu := processCPU(b) - cpu0
			b.StopTimer()
			if err := fail.Load(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/write")
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
