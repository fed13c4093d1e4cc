package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// Time to certainty (issue 18): how long after a fault the faulted
// operation is settled in the ledger. The faults are
// internal/e2e's TestLongTimeToCertainty — real worker and starter binaries, a
// Temporal dev server of their own, the sandbox's GitHub and Slack, the
// default consistency window — run certaintyRuns times by `go test` with
// CAPSTAN_CERTAINTY_OUT naming where each run writes its figures. The
// bench does not rebuild those faults in-process: a SIGTERM needs a worker
// process of its own, and the test is what holds each row to exactly one
// effect and to issue 18's time limits.

// certaintyRuns is how many times each fault is run.
var certaintyRuns = 3

// certaintyFault is one row of the table, in TestLongTimeToCertainty's order.
type certaintyFault struct {
	name  string // the e2e row's name
	fault string
	// before is median and worst from bench/results/time-to-certainty.md
	// (main at 563dda7, 2026-12-02: before the re-send after one look-up,
	// the reconciler's short backoff and the worker's hand-off); 0 is
	// "< 0.1 s".
	before [2]time.Duration
}

var certaintyFaults = []certaintyFault{
	{"pulls.create_502", "PR create: 502 before acting", [2]time.Duration{60300 * time.Millisecond, 60300 * time.Millisecond}},
	{"pulls.create_drop", "PR create: acted, answer lost", [2]time.Duration{600 * time.Millisecond, 700 * time.Millisecond}},
	{"pulls.create_late", "PR create: acted, answer 90 s late", [2]time.Duration{15100 * time.Millisecond, 15300 * time.Millisecond}},
	{"git.create-ref_502", "branch create: 502 before acting", [2]time.Duration{60200 * time.Millisecond, 60200 * time.Millisecond}},
	{"contents_drop", "file write: acted, answer lost", [2]time.Duration{0, 0}},
	{"comment_drop", "comment: acted, answer lost", [2]time.Duration{400 * time.Millisecond, 500 * time.Millisecond}},
	{"chat.postMessage_drop", "Slack post: acted, answer lost", [2]time.Duration{300 * time.Millisecond, 400 * time.Millisecond}},
	{"sigterm_pulls.create", "SIGTERM mid PR create", [2]time.Duration{6100 * time.Millisecond, 6200 * time.Millisecond}},
}

// certaintyFigure is one row of one run, as TestLongTimeToCertainty writes it.
type certaintyFigure struct {
	Name      string  `json:"name"`
	Fault     string  `json:"fault"`
	SettledMS float64 `json:"settled_ms"`
	DoneMS    float64 `json:"done_ms"`
	Failed    bool    `json:"failed"`
}

// certaintyResult is the section's outcome.
type certaintyResult struct {
	runs    int
	figures map[string][]certaintyFigure // row name → one per run
	took    time.Duration
	err     error // the test failed or could not run; figures may be partial
	output  string
}

// runCertainty runs TestLongTimeToCertainty certaintyRuns times in one `go
// test`, with CAPSTAN_LONG=1: it is a long run, which `make test` skips.
func runCertainty(ctx context.Context, dir string) certaintyResult {
	res := certaintyResult{runs: certaintyRuns, figures: map[string][]certaintyFigure{}}
	start := time.Now()
	file := filepath.Join(dir, "certainty.jsonl")
	cmd := exec.CommandContext(ctx, "go", "test", "-count", fmt.Sprint(certaintyRuns), "-timeout", "60m",
		"-run", "^TestLongTimeToCertainty$", "./internal/e2e/")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CAPSTAN_LONG=1", "CAPSTAN_CERTAINTY_OUT="+file)
	out, err := cmd.CombinedOutput()
	res.took, res.output = time.Since(start), string(out)
	if err != nil {
		res.err = fmt.Errorf("go test -run TestLongTimeToCertainty: %w", err)
	}
	f, ferr := os.Open(file)
	if ferr != nil {
		if res.err == nil {
			res.err = ferr
		}
		return res
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var fig certaintyFigure
		if err := json.Unmarshal(sc.Bytes(), &fig); err != nil {
			res.err = fmt.Errorf("%s: %w", file, err)
			return res
		}
		res.figures[fig.Name] = append(res.figures[fig.Name], fig)
	}
	return res
}

// medianWorst are the median and the worst of the settled times of the
// runs that passed.
func medianWorst(figs []certaintyFigure) (median, worst time.Duration, n int) {
	var d []time.Duration
	for _, f := range figs {
		if !f.Failed {
			d = append(d, time.Duration(f.SettledMS*float64(time.Millisecond)))
		}
	}
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)-1], len(d)
}

// certaintySeconds writes d to a tenth of a second; under that, "< 0.1 s".
func certaintySeconds(d time.Duration) string {
	if d < 100*time.Millisecond {
		return "< 0.1 s"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// markdown is the section: the table, before and after.
func (r certaintyResult) markdown() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("## Time to certainty")
	p("")
	p("From a fault to the faulted operation settled in the ledger (issue 18): internal/e2e's TestLongTimeToCertainty, %d run(s) of every fault, "+
		"real worker and starter binaries, the default consistency window (60 s), heartbeat timeout 3 s, write timeouts 15 s, stop timeout 2 s; took %s. "+
		"Each run of a row demands exactly one branch, file write, pull request, comment and Slack message, the task completed, and issue 18's limit on the time; a run that failed is left out of the figures (runs passed). "+
		"\"before\" is main at 563dda7 (bench/results/time-to-certainty.md).", r.runs, r.took.Round(time.Second))
	p("")
	p("| fault | before: median | before: worst | after: median | after: worst | runs passed |")
	p("| --- | --- | --- | --- | --- | --- |")
	for _, f := range certaintyFaults {
		med, worst, n := medianWorst(r.figures[f.name])
		after := [2]string{"–", "–"}
		if n > 0 {
			after = [2]string{certaintySeconds(med), certaintySeconds(worst)}
		}
		p("| %s | %s | %s | %s | %s | %d of %d |", f.fault, certaintySeconds(f.before[0]), certaintySeconds(f.before[1]),
			after[0], after[1], n, len(r.figures[f.name]))
	}
	if r.err != nil {
		p("")
		p("**The run did not pass:** %v.", r.err)
	}
	return w.String()
}
