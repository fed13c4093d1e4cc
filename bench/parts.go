package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A part is a piece of the work a task makes this process do, named for
// what it is for rather than for the package that spends the CPU: the
// ledger's fsync is a system call and its B-tree code is SQLite's, but both
// are the ledger. A profile sample's CPU goes to the first part that has a
// frame anywhere in the sample's stack (partOf), so a part listed earlier
// takes the work it causes inside a part listed later: the ledger's calls
// inside a model turn are the ledger's, the rest of the turn is the turn's.
//
// Capstan's and bare's parts share names where they do the same job (a
// model turn, a tool call), so a row's difference is what capstan pays for
// the part beyond what bare pays for the same job.
var parts = []struct{ name, frames string }{
	{"the ledger: its reads, writes and fsyncs (SQLite)",
		"github.com/capstanhq/capstan/internal/ledger/sqlite. github.com/capstanhq/capstan/internal/ledger/postgres. modernc.org/sqlite"},
	{"metrics: capstan's and the SDK's (OpenTelemetry)",
		"go.opentelemetry.io/ github.com/capstanhq/capstan/internal/metrics. go.temporal.io/sdk/contrib/opentelemetry."},
	{"the profiler itself", "runtime/pprof."},
	{"the policy's decision on a tool call", "github.com/capstanhq/capstan/internal/activities.(*Activities).screen"},
	{"facts read before a tool sends", "github.com/capstanhq/capstan/internal/activities.(*Activities).readFacts"},
	{"model turns: the request, its stream, the transcript",
		"github.com/capstanhq/capstan/internal/activities.(*Activities).ModelTurn github.com/capstanhq/capstan/internal/model. main.(*bareActivities).BareModelTurn"},
	{"tool calls: the request and what is kept of it",
		"github.com/capstanhq/capstan/internal/activities.(*Activities).ExecuteTool main.(*bareActivities).BareTool"},
	{"deliveries (Slack)", "github.com/capstanhq/capstan/internal/activities.(*Activities).Deliver main.(*bareActivities).BareDeliver"},
	{"workflow code (capstan's AgentTask, bare's BareTask)", "go.temporal.io/sdk/internal.(*coroutineState)."},
	{"the bench driver: starting tasks, waiting for them (not the worker)", "main.runRound main.(*env)."},
	{"the SDK's workflow tasks: history, commands, answering",
		"go.temporal.io/sdk/internal.(*workflowTaskProcessor). go.temporal.io/sdk/internal.(*workflowTaskHandlerImpl)."},
	{"the SDK's activity tasks: polling, running, answering", "go.temporal.io/"},
	{"gRPC connections to the server", "google.golang.org/grpc"},
	{"the sandbox's fake servers (not the worker)", "github.com/capstanhq/capstan/internal/sandbox. net/http.(*conn).serve"},
	{"HTTP clients' connections (model, GitHub, Slack)", "net/http."},
	{"garbage collection (background)", "runtime.gcBgMarkWorker runtime.bgsweep runtime.bgscavenge"},
	{"the Go scheduler and the rest of the runtime", "runtime."},
}

// partOf is the part a stack (function names, leaf first) belongs to, or
// "other".
func partOf(stack []string) string {
	for _, p := range parts {
		for _, prefix := range strings.Fields(p.frames) {
			for _, fn := range stack {
				if strings.HasPrefix(fn, prefix) {
					return p.name
				}
			}
		}
	}
	return "other"
}

// partsTable writes capstan's CPU per task beside bare's, by part, for one
// pool size: the machine's whole difference, split into the dev server,
// what no process is charged for (kernel threads), and this process's
// parts. c and b are the two merged profiles' CPU by part, over ct and bt
// tasks.
func partsTable(p func(string, ...any), capstan, bare *loadStats, c, b map[string]time.Duration, ct, bt int) {
	per := func(m map[string]time.Duration, name string, tasks int) time.Duration {
		return m[name] / time.Duration(max(tasks, 1))
	}
	cs, cw := capstan.cpuPerTask()
	bs, bw := bare.cpuPerTask()
	cm, _ := capstan.hostPerTask()
	bm, _ := bare.hostPerTask()
	row := func(name string, cv, bv time.Duration) {
		p("| %s | %s | %s | %s |", name, cpuMS(cv), cpuMS(bv), signedMS(cv-bv))
	}
	p("| part | capstan CPU/task | bare CPU/task | capstan − bare |")
	p("| --- | --- | --- | --- |")
	row("**the machine** (every process and the kernel)", cm, bm)
	row("· the dev server process", cs, bs)
	row("· kernel threads and other processes (the machine less the two processes)", cm-cs-cw, bm-bs-bw)
	row("· this process: workers, sandbox and driver", cw, bw)
	var ctot, btot time.Duration
	for _, d := range c {
		ctot += d
	}
	for _, d := range b {
		btot += d
	}
	row("· · of which the profile saw", ctot/time.Duration(max(ct, 1)), btot/time.Duration(max(bt, 1)))
	names := keysOf(c)
	for n := range b {
		if _, ok := c[n]; !ok {
			names = append(names, n)
		}
	}
	diff := func(n string) time.Duration { return per(c, n, ct) - per(b, n, bt) }
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(diff(y), diff(x)), cmp.Compare(x, y)) })
	for _, n := range names {
		row("· · · "+n, per(c, n, ct), per(b, n, bt))
	}
}

// signedMS is a CPU difference in milliseconds with its sign.
func signedMS(d time.Duration) string {
	return fmt.Sprintf("%+.1f ms", float64(d)/float64(time.Millisecond))
}
