package main

import (
	"testing"
	"time"
)

func TestParseHostCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	before := parseHostCPU("cpu  1000 10 300 5000 40 0 50 100 0 0")
	after := parseHostCPU("cpu  1600 10 500 5200 40 0 90 400 0 0")
	d := after.since(before)
	if want := (hostCPU{busy: 8400 * time.Millisecond, steal: 3000 * time.Millisecond, total: 13400 * time.Millisecond}); d != want {
		t.Fatalf("since = %+v, want %+v", d, want)
	}
	if got := d.stealShare(); got < 0.2238 || got > 0.2239 {
		t.Errorf("steal share %.4f, want 30/134", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3"} {
		if h := parseHostCPU(bad); h != (hostCPU{}) || h.stealShare() != 0 {
			t.Errorf("parseHostCPU(%q) = %+v, want zero", bad, h)
		}
	}
}
