package main

import (
	"bufio"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// memPeak is the most memory this process held while a round ran.
type memPeak struct {
	rss        uint64 // resident set size, from /proc/self/status VmRSS
	heap       uint64 // live and not-yet-swept heap objects (runtime/metrics)
	goroutines uint64
}

func (m memPeak) max(o memPeak) memPeak {
	return memPeak{rss: max(m.rss, o.rss), heap: max(m.heap, o.heap), goroutines: max(m.goroutines, o.goroutines)}
}

// sampleMemory samples every 50 ms until the returned function is called,
// which returns the peaks.
func sampleMemory() func() memPeak {
	done := make(chan struct{})
	out := make(chan memPeak, 1)
	go func() {
		var peak memPeak
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = peak.max(readMemory())
			select {
			case <-tick.C:
			case <-done:
				out <- peak.max(readMemory())
				return
			}
		}
	}()
	return func() memPeak {
		close(done)
		return <-out
	}
}

var memSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/sched/goroutines:goroutines"},
}

func readMemory() memPeak {
	s := make([]metrics.Sample, len(memSamples))
	copy(s, memSamples)
	metrics.Read(s)
	m := memPeak{rss: vmRSS()}
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.heap = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		m.goroutines = s[1].Value.Uint64()
	}
	return m
}

// vmRSS reads VmRSS from /proc/self/status, in bytes; 0 if unreadable.
func vmRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
