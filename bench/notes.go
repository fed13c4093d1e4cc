package main

import (
	"fmt"
	"strings"
	"time"
)

// writeCalls are the ledger methods that write: each is a transaction of
// its own on the worker's one writer connection.
var writeCalls = []string{"Claim", "MarkRunning", "Renew", "Complete", "Release", "TakeForReconcile", "PutItem", "CommitTurn"}

// writeMix lists, per task, the write calls c made: "Claim 4, Complete 4, …",
// in writeCalls' order, leaving out those it did not make.
func writeMix(c *loadStats, tasks float64) string {
	var parts []string
	for _, m := range writeCalls {
		if calls := float64(c.methods[m].calls) / tasks; calls >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", m, calls))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writesPerTask is how many write calls c made per task.
func writesPerTask(c *loadStats, tasks float64) float64 {
	var calls float64
	for _, m := range writeCalls {
		calls += float64(c.methods[m].calls)
	}
	return calls / tasks
}

// activityRunning sums the phases in which a task's activities run.
func activityRunning(ps phaseSums) time.Duration {
	return ps.perTask(phaseModel) + ps.perTask(phaseTool) + ps.perTask(phaseDeliver) + ps.perTask(phaseOtherRun)
}

// whyNotes explains, from this run's own figures, a missed latency or
// throughput target: where capstan's extra time goes and what would
// shorten it. It returns "" when both are met.
func (r *results) whyNotes() string {
	var latencyMissed, throughputMissed, ledgerMissed bool
	for _, t := range r.targets() {
		if t.status != missed {
			continue
		}
		latencyMissed = latencyMissed || strings.Contains(t.what, "latency")
		throughputMissed = throughputMissed || strings.Contains(t.what, "throughput")
		ledgerMissed = ledgerMissed || strings.Contains(t.what, "ledger's share")
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }

	if latencyMissed {
		workers := r.worstWorkers(10, p50ms, true)
		c, b := r.cell(kindCapstan, workers, 10), r.cell(kindBare, workers, 10)
		cp, bp := r.phases[loadKey{kindCapstan, workers, 10}], r.phases[loadKey{kindBare, workers, 10}]
		if c != nil && b != nil && cp.tasks > 0 && bp.tasks > 0 {
			done, failed := c.tasks()
			n := time.Duration(max(done+failed, 1))
			var writes float64
			var writeTime time.Duration
			for _, m := range writeCalls {
				writes += float64(c.methods[m].calls) / float64(n)
				writeTime += c.methods[m].time / n
			}
			one := r.cell(kindCapstan, workers, 1)
			alone := "–"
			if one != nil {
				od, of := one.tasks()
				var ow float64
				var ot time.Duration
				for _, m := range writeCalls {
					ow += float64(one.methods[m].calls)
					ot += one.methods[m].time
				}
				if ow > 0 && od+of > 0 {
					alone = cpuMS(ot / time.Duration(ow))
				}
			}
			perWrite := "–"
			if writes > 0 {
				perWrite = cpuMS(time.Duration(float64(writeTime) / writes))
			}
			heartbeats := float64(c.rpcs["RecordActivityTaskHeartbeat"]) / float64(n)
			p("**Where capstan's latency goes at N = 10 on %s.** Its activities ran %s per task against bare's %s; %s of capstan's is inside ledger calls, %s of it in %.0f write transactions per task (%s).",
				workersLabel(workers), ms(activityRunning(cp)), ms(activityRunning(bp)), ms(c.ledger/n), ms(writeTime), writes, writeMix(c, float64(n)))
			if r.onPostgres(workers) {
				p("Each write is a PostgreSQL transaction committed to its WAL before it returns: a write took %s on average at N = 1 and %s at N = 10.", alone, perWrite)
			} else {
				p("Each write is fsynced (SQLite synchronous=FULL) and waits for the worker's one writer connection (and for the other workers' writes to the same file, on the ledger's writer lock): a write took %s on average at N = 1 and %s at N = 10.", alone, perWrite)
			}
			if heartbeats >= 0.5 {
				p("Model turns also heartbeat (a turn's first beat comes 250 ms in, its details carrying the attempt's phase): %.1f RecordActivityTaskHeartbeat per task; bare sends none.", heartbeats)
			}
			p("What is left is one fsynced write per step that must be durable before the next: a claim before each call is sent, an outcome before each operation returns, a commit per turn.")
			p("For pools, the PostgreSQL ledger's writers do not queue on one file (claims/s at 8 claimers above). Relaxing synchronous=FULL would trade away the durability the at-most-once rules rest on, so it is not on the list.")
			p("")
		}
	}
	if throughputMissed {
		workers := r.worstWorkers(100, tput, false)
		c, b := r.cell(kindCapstan, workers, 100), r.cell(kindBare, workers, 100)
		if c != nil && b != nil {
			cs, cw := c.cpuPerTask()
			bs, bw := b.cpuPerTask()
			predicted := float64(bs+bw) / float64(max(cs+cw, 1))
			_, _, measured, _ := r.ratio(workers, 100, tput)
			done, failed := c.tasks()
			n := float64(max(done+failed, 1))
			servers := "dev server " + cpuMS(cs)
			if pg := c.ledgerCPUPerTask(); pg > 0 {
				servers = fmt.Sprintf("dev server %s, PostgreSQL %s", cpuMS(cs-pg), cpuMS(pg))
			}
			p("**Where capstan's throughput goes at N = 100 on %s.** A task costs %s of CPU with capstan (%s, this process %s) against %s bare (%s, %s).",
				workersLabel(workers), cpuMS(cs+cw), servers, cpuMS(cw), cpuMS(bs+bw), cpuMS(bs), cpuMS(bw))
			p("When every core is busy that alone predicts a ratio of %.2f×; the run measured %.2f×, so the extra CPU is what costs the throughput.", predicted, measured)
			if beats := float64(c.rpcs["RecordActivityTaskHeartbeat"]) / n; beats >= 0.5 {
				p("Capstan also sends %.1f heartbeats per task here (model turns that ran past 250 ms).", beats)
			}
			p("The dev server's share comes from no one thing capstan asks of it: removed one at a time in scratch builds on 2026-12-03 (docs/design.md, \"Part by part\"), its marker, its search-attribute updates, its heartbeat timeouts and 6.6 KB more payload per task each moved the server's CPU by less than one run's noise; the server does more time-driven work in capstan's longer rounds.")
			p("In the worker (the profile below) it is mostly SQLite and its fsyncs — the one part that moves the ratio alone (0.86× with fsync off, never shipped) — then the garbage of the ledger's JSON and much spread thin (%s writes per task: %s).", fmt.Sprintf("%.0f", writesPerTask(c, n)), writeMix(c, n))
			if r.onPostgres(workers) {
				p("The workers here share a PostgreSQL ledger whose server runs on the same two CPUs, and its CPU is counted above.")
			} else if workers > 1 {
				p("The workers here share one SQLite file, as worker processes on one machine would, and sharing costs of itself: each commits its own groups and each one's writes empty the other's page cache, about half as much CPU again per write as one Store alone (`BenchmarkOneFileOneOrTwoStores`; docs/design.md, \"Why two workers fare worse\").")
			}
			p("")
		}
	}
	if ledgerMissed {
		workers, share := targetWorkers, 0.0
		for _, n := range []int{1, 2} {
			if c := r.cell(kindCapstan, n, 100); c != nil && c.ledgerShare() > share {
				workers, share = n, c.ledgerShare()
			}
		}
		c := r.cell(kindCapstan, workers, 100)
		done, failed := c.tasks()
		n := time.Duration(max(done+failed, 1))
		var writeTime time.Duration
		for _, m := range writeCalls {
			writeTime += c.methods[m].time / n
		}
		p("**Where the ledger's time goes at N = 100 on %s (%s).** %s per task inside ledger calls, %s of it in writes (%s): each write is a transaction committed durably before it returns, and on SQLite they queue behind each worker's one writer connection and, with two workers, on the lock of their one file.",
			workersLabel(workers), r.ledgerOf(workers), ms(c.ledger/n), ms(writeTime), writeMix(c, float64(n)))
		if !r.onPostgres(workers) {
			p("A pool of workers belongs on the PostgreSQL ledger, whose writers do not queue on one file.")
		}
		p("")
	}
	return strings.TrimRight(w.String(), "\n")
}

// worstWorkers is the pool size whose capstan/bare ratio at n is worst:
// the highest when higher is worse, else the lowest.
func (r *results) worstWorkers(n int, f func(*loadStats) float64, higherIsWorse bool) int {
	worst, at := 0.0, targetWorkers
	for _, workers := range []int{1, 2} {
		_, _, x, ok := r.ratio(workers, n, f)
		if !ok {
			continue
		}
		if worst == 0 || (higherIsWorse && x > worst) || (!higherIsWorse && x < worst) {
			worst, at = x, workers
		}
	}
	return at
}
