package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger/sqlite"
)

// BenchmarkSharedFileWrites measures what a write costs its caller when two
// Stores on one file — two workers sharing a ledger, as the bench runs them
// — write at once, five writers each (N = 10 on 2 workers): CommitTurn of a
// small turn and one item, b.N writes in all. Each writer pauses a random
// time below pause before each write, standing for the rest of a task's
// work; pause=0 keeps the file saturated. "busy-handler" leaves the
// writers' lock out, so a Store waiting for the other's commit sleeps in
// SQLite's busy handler; "writer-lock" waits on the flock and wakes when
// the other lets go. It reports the latency of one write (p50, mean, p99,
// in ms) and the writes per second of both Stores together.
func BenchmarkSharedFileWrites(b *testing.B) {
	for _, pause := range []time.Duration{0, 5 * time.Millisecond} {
		for _, v := range []struct {
			name string
			opts func(sqlite.Options) sqlite.Options
		}{
			{"busy-handler", sqlite.WithoutWriterLock},
			{"writer-lock", func(o sqlite.Options) sqlite.Options { return o }},
		} {
			b.Run(fmt.Sprintf("pause=%v/%s", pause, v.name), func(b *testing.B) {
				benchSharedWrites(b, v.opts, pause)
			})
		}
	}
}

func benchSharedWrites(b *testing.B, opts func(sqlite.Options) sqlite.Options, pause time.Duration) {
	const stores, writers = 2, 5
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	ss := openStores(b, path, stores, opts(sqlite.Options{}))
	var (
		next atomic.Int64
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, b.N)
		wg   sync.WaitGroup
		fail atomic.Value
	)
	b.ResetTimer()
	start := time.Now()
	for i := range stores * writers {
		s := ss[i%stores]
		wg.Go(func() {
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				if pause > 0 {
					time.Sleep(rand.N(pause))
				}
				id := fmt.Sprintf("turn-%d-%d", i, len(mine))
				t0 := time.Now()
				if _, err := s.CommitTurn(ctx, id, []byte(id), []byte("item "+id)); err != nil {
					fail.Store(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := fail.Load(); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(sum/time.Duration(len(lat))), "mean-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "writes/s")
}

// openStores opens n Stores of the file at path, closed when b ends: the
// workers of one machine sharing a ledger.
func openStores(b *testing.B, path string, n int, o sqlite.Options) []*sqlite.Store {
	b.Helper()
	ss := make([]*sqlite.Store, n)
	for i := range ss {
		s, err := sqlite.Open(context.Background(), path, o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	return ss
}
