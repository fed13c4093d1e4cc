// Command bench measures, in one run on one machine, what capstan costs
// over a bare Temporal workflow doing the same work, and checks the targets
// of issue 7. `make bench` runs it; it is a program, not a timed test, and
// `make test` does not run it.
//
// It starts a Temporal dev server from the pinned CLI, the sandbox (model,
// GitHub and Slack fakes on loopback) and workers in this process — capstan
// workers built by internal/workerapp, the package the worker binary runs,
// configured with the environment the sandbox hands a worker — then
// measures, side by side:
//
//   - tasks per second and p50/p99 task latency for N = 1, 10 and 100
//     concurrent sandbox tasks (the demo script: four model turns, three
//     GitHub writes, one Slack post) on pools of 1 and 2 workers, for capstan
//     (AgentTask and its activities over a SQLite ledger) and for BareTask
//     (bare.go: the same HTTP calls with no ledger, guard or
//     reconciliation). Rounds of the two alternate, so the machine's drift
//     falls on both; the ratios capstan/bare are the overhead figures.
//     With -pool-ledger (a PostgreSQL URL) the 2-worker pool shares a
//     PostgreSQL ledger, as a pool runs in production, in a schema of the
//     run's own, and that server's CPU is counted beside the dev server's;
//   - the ledger's share of capstan's task time at N = 100 (every ledger call
//     timed, over the tasks' summed latency), and this process's resident
//     memory and Go heap at N = 100 (the process holds the workers, the
//     sandbox and the driver);
//   - ledger claims per second with 1 and 8 claimers on SQLite and, when
//     CAPSTAN_TEST_POSTGRES_DSN names a server, PostgreSQL
//     (ledgertest.BenchmarkClaimers through testing.Benchmark);
//   - history bytes (proto.Size of every event) per turn of tasks of 1, 20
//     and 200 turns, capstan and bare, and the total over every run of a
//     1,000-turn capstan task, which continues as new;
//   - the requests a pool of workers sends to the model provider while it
//     answers 503 for 20 s, with capstan's breakers off and on;
//   - time to certainty (certainty.go): from each fault of issue 18 to its
//     operation settled, median and worst of three runs, before and after
//     (`-certainty` measures only this, into time-to-certainty-latest.md).
//
// Reading the results: bench/results/latest.md opens with the targets, each
// met or missed with its figures; where one is missed it shows where this
// process's CPU went (pprof profiles of the N = 100 rounds, next to it) and
// the dev server's CPU per task. Absolute figures depend on the machine and
// on whatever else runs on it (the load average is recorded); the ratios are
// what to compare between runs. bench/results/latest.svg charts the same.
//
// Progress goes to stderr; the table is printed at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
)

var poolLedger string

func main() {
	os.Exit(run())
}

// historyTurns are the task lengths whose history is measured, and
// longTurns the long task's.
var (
	historyTurns = []int{1, 20, 200}
	longTurns    = 1000
)

func run() int {
	out := flag.String("out", filepath.Join(testenv.RepoRoot(), "bench", "results"), "directory for latest.md, latest.svg and the profiles")
	quick := flag.Bool("quick", false, "a short run to try the bench: smaller N, fewer rounds, shorter tasks; not comparable, written to a temporary directory unless -out is given")
	certaintyOnly := flag.Bool("certainty", false, "only the time-to-certainty table (internal/e2e's faults): written to time-to-certainty-latest.md")
	flag.IntVar(&certaintyRuns, "certainty-runs", certaintyRuns, "how many times each time-to-certainty fault is run")
	loadOnly := flag.Bool("load", false, "only the tasks' throughput and latency beside bare (and where their time went): written to load-latest.md, about nine minutes")
	flag.StringVar(&poolLedger, "pool-ledger", "", "a PostgreSQL server (postgres:// URL) for the 2-worker pool's ledger, as a pool runs in production, in a schema the run creates and drops; default one SQLite file both workers open")
	flag.Parse()
	outSet := false
	flag.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if *loadOnly && !outSet {
		// The load table alone never replaces the whole bench's results.
		*out = filepath.Join(os.TempDir(), "capstan-bench-load")
	}
	if *quick && !outSet {
		// A trial run never replaces the committed results.
		*out = filepath.Join(os.TempDir(), "capstan-bench-quick")
	}
	if *quick {
		loadPlan = []loadStep{{1, 1, 1}, {10, 1, 1}}
		historyTurns, longTurns = []int{1, 20}, 50
		outageLengthRun, outageTasksRun = 5*time.Second, 10
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "capstan-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if poolLedger != "" {
		// Before anything is measured: a wrong URL is found in a second,
		// not after the 1-worker rounds.
		dsn, drop, err := poolSchema(poolLedger)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		defer drop()
		poolLedger = dsn
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}

	if *certaintyOnly {
		return runCertaintyOnly(ctx, dir, *out)
	}
	res := &results{started: time.Now(), quick: *quick, load: loadResults{}, loadBefore: loadAverage()}
	progress("starting the Temporal dev server and the sandbox (scratch in %s)", dir)
	e, err := startEnv(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer e.close()

	measureAll := measure
	name := "latest.md"
	if *loadOnly {
		measureAll, name = measureLoad, "load-latest.md"
		res.loadOnly = true
	}
	if err := measureAll(ctx, e, res, dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if !*loadOnly {
		progress("time to certainty: internal/e2e's faults, %d run(s)", certaintyRuns)
		c := runCertainty(ctx, dir)
		res.certainty = &c
	}
	res.took = time.Since(res.started)
	res.loadAfter = loadAverage()
	res.profiles = summarizeProfiles(dir, *out, res)

	table := res.markdown()
	wrote := []string{filepath.Join(*out, name)}
	if err := os.WriteFile(wrote[0], []byte(table), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if !*loadOnly {
		wrote = append(wrote, filepath.Join(*out, "latest.svg"))
		if err := os.WriteFile(wrote[1], []byte(res.svg()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	fmt.Print(table)
	progress("done in %s; wrote %s", res.took.Round(time.Second), strings.Join(wrote, " and "))
	return 0
}

// measureLoad runs the load table alone: capstan beside bare on 1 and 2
// workers, and where the tasks' time went (-load).
func measureLoad(ctx context.Context, e *env, res *results, dir string) error {
	for _, workers := range []int{1, 2} {
		progress("load: capstan and bare, %d worker(s), N = %s", workers, planText(workers))
		ledger := "sqlite://" + filepath.Join(dir, fmt.Sprintf("load-w%d.db", workers))
		if workers > 1 && poolLedger != "" {
			progress("load: the 2-worker pool's ledger is %s", ledgerdsn.Redact(poolLedger))
			ledger, res.poolOnPostgres = poolLedger, true
		}
		if err := e.runLoad(ctx, workers, ledger, res.load, dir); err != nil {
			return err
		}
	}
	// The history of one demo task of each kind: what the server stores.
	res.demoHistory = map[kind]historyRow{}
	for _, k := range []kind{kindCapstan, kindBare} {
		if s := res.load[loadKey{k, 1, 1}]; s != nil && len(s.rounds) > 0 && len(s.rounds[0].ids) > 0 {
			row := historyRow{kind: k, turns: demoTurns}
			row.err = e.historySize(ctx, s.rounds[0].ids[0], &row)
			res.demoHistory[k] = row
		}
	}
	progress("reading where the tasks' time went, from their histories")
	res.phases = map[loadKey]phaseSums{}
	for key, s := range res.load {
		if key.n >= 10 {
			res.phases[key] = e.taskPhases(ctx, s)
		}
	}
	return nil
}

// measure runs every measurement in turn. The 1,000-turn task runs in the
// background, on its own worker and sandbox, while the measurements that do
// not time anything (history sizes, the outage's request counts) run.
func measure(ctx context.Context, e *env, res *results, dir string) error {
	if err := measureLoad(ctx, e, res, dir); err != nil {
		return err
	}
	progress("ledger claims per second")
	res.claims = runClaims(ctx)

	progress("the policy's cost per tool call")
	res.policy = runPolicy(ctx)

	progress("history: a %d-turn capstan task in the background", longTurns)
	longDone := make(chan historyRow, 1)
	longSandbox, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		return err
	}
	defer longSandbox.Close()
	longQueue := e.next("bench-long")
	lp, err := e.startCapstan(ctx, longQueue, capstanOptions{workers: 1, sandbox: longSandbox,
		breakers: breakersBuilt, ledgerDSN: "sqlite://" + filepath.Join(dir, "long.db")})
	if err != nil {
		return err
	}
	defer lp.stop()
	go func() { longDone <- e.runHistory(ctx, kindCapstan, longQueue, longTurns) }()

	progress("history: %v turns, capstan and bare, all at once", historyTurns)
	if err := measureHistory(ctx, e, res, dir); err != nil {
		return err
	}

	for _, on := range []bool{false, true} {
		progress("outage: the model provider down for %s under %d tasks, breakers %s", outageLengthRun, outageTasksRun, onOff(on))
		res.outage = append(res.outage, e.runOutage(ctx, on))
	}

	progress("history: waiting for the %d-turn task", longTurns)
	select {
	case res.long = <-longDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	progress("history capstan %4d turns: %s", longTurns, res.long.text())
	return nil
}

// measureHistory runs every turns-N task at once, capstan and bare: a
// history's size does not depend on timing.
func measureHistory(ctx context.Context, e *env, res *results, dir string) error {
	hq, bq := e.next("bench-history"), e.next("bench-history-bare")
	hp, err := e.startCapstan(ctx, hq, capstanOptions{workers: 1, breakers: breakersBuilt,
		ledgerDSN: "sqlite://" + filepath.Join(dir, "history.db")})
	if err != nil {
		return err
	}
	defer hp.stop()
	bp, err := e.startBare(ctx, bq, 1, nil)
	if err != nil {
		return err
	}
	defer bp.stop()
	var wg sync.WaitGroup
	rows := make([]historyRow, 2*len(historyTurns))
	for i, turns := range historyTurns {
		for j, k := range []kind{kindCapstan, kindBare} {
			q := hq
			if k == kindBare {
				q = bq
			}
			wg.Go(func() { rows[2*i+j] = e.runHistory(ctx, k, q, turns) })
		}
	}
	wg.Wait()
	for _, row := range rows {
		progress("history %-7s %4d turns: %s", row.kind, row.turns, row.text())
	}
	res.history = rows
	return nil
}

func planText(workers int) string {
	var parts []string
	for _, p := range loadPlan {
		parts = append(parts, fmt.Sprintf("%d (%d rounds)", p.n, p.rounds(workers)))
	}
	return strings.Join(parts, ", ")
}

// runCertaintyOnly is bench -certainty: the time-to-certainty table alone.
func runCertaintyOnly(ctx context.Context, dir, out string) int {
	progress("time to certainty: internal/e2e's faults, %d run(s)", certaintyRuns)
	c := runCertainty(ctx, dir)
	table := "# capstan bench: time to certainty\n\n" + fmt.Sprintf("`go run ./bench -certainty` on %s, load average %s at the end.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), loadAverage()) + c.markdown()
	if err := os.WriteFile(filepath.Join(out, "time-to-certainty-latest.md"), []byte(table), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Print(table)
	if c.err != nil {
		fmt.Fprintln(os.Stderr, "bench:", c.err)
		fmt.Fprintln(os.Stderr, c.output)
		return 1
	}
	return 0
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// loadAverage is the machine's 1-minute load average, as /proc/loadavg
// says; other work on the machine shows in it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// cpuMS is a CPU time to a tenth of a millisecond.
func cpuMS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
