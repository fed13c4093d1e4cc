package main

import (
	"fmt"
	"slices"
	"time"
)

// The tables of the report that say where a task's time goes: phases read
// from the histories, the ledger's calls by method, the workers' calls to
// the server.

// phaseTable writes where the tasks' time went on one worker, by the
// server's clock.
func (r *results) phaseTable(p func(string, ...any)) {
	var keys []loadKey
	for _, plan := range loadPlan {
		for _, k := range []kind{kindCapstan, kindBare} {
			if ps, ok := r.phases[loadKey{k, 1, plan.n}]; ok && ps.err == nil && ps.tasks > 0 {
				keys = append(keys, loadKey{k, 1, plan.n})
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	p("")
	p("### Where a task's time goes (1 worker)")
	p("")
	p("Mean per task, from the tasks' histories (the server's clock). Waiting is from a task being scheduled until a worker takes it.")
	p("")
	head, sep := "| |", "| --- |"
	for _, k := range keys {
		head += fmt.Sprintf(" %s N = %d |", k.kind, k.n)
		sep += " --- |"
	}
	p("%s", head)
	p("%s", sep)
	row := func(name string, f func(phaseSums) time.Duration) {
		line := "| " + name + " |"
		for _, k := range keys {
			line += " " + ms(f(r.phases[k])) + " |"
		}
		p("%s", line)
	}
	for _, ph := range phaseOrder {
		if ph == phaseOtherRun {
			continue
		}
		row(ph, func(ps phaseSums) time.Duration { return ps.perTask(ph) })
	}
	line := "| · of the activities' running time, inside ledger calls |"
	for _, k := range keys {
		st := r.load[k]
		done, failed := st.tasks()
		if k.kind != kindCapstan || done+failed == 0 {
			line += " – |"
			continue
		}
		line += " " + ms(st.ledger/time.Duration(done+failed)) + " |"
	}
	p("%s", line)
	row("between events (workers' and server's own time)", phaseSums.rest)
	line = "| workflow tasks timed out, per task (each taken again with the whole history) |"
	for _, k := range keys {
		ps := r.phases[k]
		line += fmt.Sprintf(" %.2f |", float64(ps.wftTimeouts)/float64(max(ps.tasks, 1)))
	}
	p("%s", line)
	row("start to close", func(ps phaseSums) time.Duration { return ps.total / time.Duration(max(ps.tasks, 1)) })
	r.ledgerMethodTable(p, 1)
	r.ledgerMethodTable(p, 2)
	r.rpcTable(p, 10)
}

// rpcTable writes the workers' calls to the Temporal server per task, by
// method, at N on one worker, capstan beside bare.
func (r *results) rpcTable(p func(string, ...any), n int) {
	c, b := r.cell(kindCapstan, 1, n), r.cell(kindBare, 1, n)
	if c == nil || b == nil || len(c.rpcs) == 0 || len(b.rpcs) == 0 {
		return
	}
	cd, cf := c.tasks()
	bd, bf := b.tasks()
	methods := keysOf(c.rpcs)
	for m := range b.rpcs {
		if _, ok := c.rpcs[m]; !ok {
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	p("")
	p("The workers' calls to the Temporal server per task, N = %d, 1 worker (polls wait for work, so their count also depends on timing):", n)
	p("")
	p("| call | capstan | bare |")
	p("| --- | --- | --- |")
	for _, m := range methods {
		p("| %s | %.1f | %.1f |", m, float64(c.rpcs[m])/float64(max(cd+cf, 1)), float64(b.rpcs[m])/float64(max(bd+bf, 1)))
	}
}

// ledgerMethodTable writes capstan's ledger calls per task by method, on a
// pool of the given number of workers: how many, and the time inside them.
func (r *results) ledgerMethodTable(p func(string, ...any), workers int) {
	var cells []*loadStats
	for _, plan := range loadPlan {
		if s := r.cell(kindCapstan, workers, plan.n); s != nil && len(s.methods) > 0 {
			cells = append(cells, s)
		}
	}
	if len(cells) == 0 {
		return
	}
	p("")
	p("Capstan's ledger calls per task, by method (%s; %s):", workersText(workers), r.ledgerOf(workers))
	p("")
	head, sep := "| method |", "| --- |"
	for _, s := range cells {
		head += fmt.Sprintf(" N = %d calls | N = %d time |", s.n, s.n)
		sep += " --- | --- |"
	}
	p("%s", head)
	p("%s", sep)
	for _, name := range ledgerMethods {
		line, any := "| "+name+" |", false
		for _, s := range cells {
			done, failed := s.tasks()
			n := time.Duration(max(done+failed, 1))
			m := s.methods[name]
			any = any || m.calls > 0
			line += fmt.Sprintf(" %.1f | %s |", float64(m.calls)/float64(n), cpuMS(m.time/n))
		}
		if any {
			p("%s", line)
		}
	}
}

// workersText is "1 worker" or "N workers".
func workersText(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}
