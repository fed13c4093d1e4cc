package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// The host's CPU during a round, from /proc/stat's first line. The dev
// server's and this process's CPU (round.serverCPU, round.selfCPU) leave
// out two things that decide a round's wall time on a shared virtual
// machine: the kernel's own threads (journal commits and block I/O after an
// fsync, softirqs), whose CPU no process is charged, and steal — time the
// hypervisor gave another guest while this one had work to run. A round
// that loses a third of its CPU to steal measures the host, not capstan;
// the report shows each pair's steal beside its ratio, so a reader can
// tell.

// hostCPU is the machine's CPU time, summed over its CPUs.
type hostCPU struct {
	busy  time.Duration // user, nice, system, irq, softirq: every process and the kernel
	steal time.Duration
	total time.Duration // busy, idle, iowait and steal
}

// readHostCPU reads hostCPU now; zero when /proc/stat is unreadable.
func readHostCPU() hostCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseHostCPU(line)
}

// parseHostCPU reads /proc/stat's "cpu" line: user nice system idle iowait
// irq softirq steal guest guest_nice, in clock ticks (guest time is already
// counted in user).
func parseHostCPU(line string) hostCPU {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return hostCPU{}
	}
	return hostCPU{busy: statCPU(f, 1, 2, 3, 6, 7), steal: statCPU(f, 8), total: statCPU(f, 1, 2, 3, 4, 5, 6, 7, 8)}
}

func (h hostCPU) since(before hostCPU) hostCPU {
	return hostCPU{busy: h.busy - before.busy, steal: h.steal - before.steal, total: h.total - before.total}
}

// stealShare is the share of the CPU time stolen; 0 when none was read.
func (h hostCPU) stealShare() float64 {
	if h.total <= 0 {
		return 0
	}
	return float64(h.steal) / float64(h.total)
}

// hostPerTask is the machine's busy CPU per task over the rounds, and the
// share of their CPU time stolen.
func (s *loadStats) hostPerTask() (busy time.Duration, steal float64) {
	var sum hostCPU
	for _, r := range s.rounds {
		sum.busy += r.host.busy
		sum.steal += r.host.steal
		sum.total += r.host.total
	}
	return s.perTask(func(r round) time.Duration { return r.host.busy }), sum.stealShare()
}

// hostTable is the report's section on the host during the rounds at
// N = 100: each pair's throughput beside the steal its rounds suffered,
// and the machine's CPU per task, kernel threads included.
func (r *results) hostTable(p func(string, ...any)) {
	const n = 100
	var rows []string
	for _, workers := range []int{1, 2} {
		c, b := r.cell(kindCapstan, workers, n), r.cell(kindBare, workers, n)
		if c == nil || b == nil || len(c.rounds) == 0 || len(b.rounds) == 0 {
			continue
		}
		var pairs []string
		for _, pr := range roundPairs(c, b) {
			cr, br := pr[0], pr[1]
			ct, bt := cr.tasksPerSecond(), br.tasksPerSecond()
			if bt == 0 {
				continue
			}
			pairs = append(pairs, fmt.Sprintf("%.2f× (%.1f, steal %.0f %% · %.1f, steal %.0f %%)",
				ct/bt, ct, 100*cr.host.stealShare(), bt, 100*br.host.stealShare()))
		}
		cb, cs := c.hostPerTask()
		bb, bs := b.hostPerTask()
		ratio := "–"
		if cb > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(bb)/float64(cb))
		}
		rows = append(rows, fmt.Sprintf("| %d | %s | %s · %s | %s | %.0f %% · %.0f %% |",
			workers, strings.Join(pairs, "; "), cpuMS(cb), cpuMS(bb), ratio, 100*cs, 100*bs))
	}
	if len(rows) == 0 {
		return
	}
	p("")
	p("### The host during the rounds at N = 100")
	p("")
	p("Each pair's throughput ratio, then capstan's and bare's tasks/s and the share of the round's CPU time the hypervisor stole (time this machine had work and was not run).")
	p("Machine CPU is every process's and the kernel's own threads' (an fsync's journal commit among them) per task, from /proc/stat; bare/capstan of it is the throughput ratio a dedicated, saturated machine would show.")
	p("")
	p("| workers | round pairs: ratio (capstan tasks/s, steal · bare tasks/s, steal) | machine CPU/task capstan · bare | bare/capstan | steal capstan · bare |")
	p("| --- | --- | --- | --- | --- |")
	for _, row := range rows {
		p("%s", row)
	}
}
