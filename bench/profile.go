package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// profileSummary is the "where the time goes" section: the machine's CPU
// per task over the N = 100 rounds, capstan beside bare, split down to the
// parts of this process's CPU profile.
type profileSummary struct {
	text string
}

// areas group functions by the package that spends the CPU, first match
// wins.
var areas = []struct{ name, prefixes string }{
	{"the profiler itself (runtime/pprof, its gzip)", "runtime/pprof. compress/flate.(*compressor) compress/flate.(*huffmanEncoder) compress/flate.(*huffmanBitWriter) compress/gzip.(*Writer)"},
	{"SQLite (modernc.org/sqlite, its libc)", "modernc.org/"},
	{"capstan ledger stores", "github.com/capstanhq/capstan/internal/ledger"},
	{"capstan activities and workflow", "github.com/capstanhq/capstan/internal/activities github.com/capstanhq/capstan/internal/workflows"},
	{"sandbox fakes (not the worker)", "github.com/capstanhq/capstan/internal/sandbox"},
	{"bench driver (not the worker)", "main."},
	{"model client (openai-go)", "github.com/openai/"},
	{"GitHub and Slack clients", "github.com/google/go-github github.com/slack-go/"},
	{"capstan tools and model", "github.com/capstanhq/capstan/"},
	{"Temporal SDK", "go.temporal.io/"},
	{"gRPC and protobuf", "google.golang.org/ github.com/gogo/ github.com/golang/protobuf"},
	{"JSON", "encoding/json github.com/tidwall/"},
	{"net/http, TLS, compression", "net/ vendor/golang.org/x/net crypto/ compress/ bufio."},
	{"system calls", "syscall. internal/poll. internal/runtime/syscall"},
	{"Go runtime (GC, scheduler, allocation)", "runtime. internal/runtime/ gcWriteBarrier aeshash memeqbody indexbytebody"},
}

func areaOf(fn string) string {
	for _, a := range areas {
		for _, p := range strings.Fields(a.prefixes) {
			if strings.HasPrefix(fn, p) {
				return a.name
			}
		}
	}
	return "other"
}

// cpuProfile is a merged CPU profile's samples summed by the function
// that spent them (the leaf of the stack, inlined functions included) and
// by part (partOf).
type cpuProfile struct {
	total  time.Duration
	flat   map[string]time.Duration
	byPart map[string]time.Duration
}

// readProfile merges the profiles at paths, writes the merged profile to
// merged (for `go tool pprof merged`) and reads it.
func readProfile(paths []string, merged string) (cpuProfile, error) {
	p := cpuProfile{flat: map[string]time.Duration{}, byPart: map[string]time.Duration{}}
	if out, err := exec.Command("go", append([]string{"tool", "pprof", "-proto", "-output=" + merged}, paths...)...).CombinedOutput(); err != nil {
		return p, fmt.Errorf("go tool pprof -proto: %w: %s", err, bytes.TrimSpace(out))
	}
	f, err := os.Open(merged)
	if err != nil {
		return p, err
	}
	defer f.Close()
	prof, err := profile.Parse(f)
	if err != nil {
		return p, fmt.Errorf("read profile %s: %w", merged, err)
	}
	cpu := slices.IndexFunc(prof.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" })
	if cpu < 0 {
		return p, fmt.Errorf("profile %s has no cpu samples", merged)
	}
	var stack []string
	for _, s := range prof.Sample {
		stack = stack[:0]
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil {
					stack = append(stack, line.Function.Name)
				}
			}
		}
		if len(stack) == 0 {
			continue
		}
		d := time.Duration(s.Value[cpu])
		p.flat[stack[0]] += d
		p.byPart[partOf(stack)] += d
		p.total += d
	}
	return p, nil
}

func (p cpuProfile) byArea() map[string]time.Duration {
	m := map[string]time.Duration{}
	for fn, d := range p.flat {
		m[areaOf(fn)] += d
	}
	return m
}

// summarizeProfiles reads the N = 100 profiles of the run's rounds from
// dir, keeps the merged profiles in out/profiles, and writes the section:
// capstan's CPU per task beside bare's by part on each pool size, then one
// worker's by area of code and its busiest functions.
func summarizeProfiles(dir, out string, r *results) profileSummary {
	pools := slices.DeleteFunc([]int{1, 2}, func(workers int) bool {
		return r.cell(kindCapstan, workers, 100) == nil || r.cell(kindBare, workers, 100) == nil
	})
	if len(pools) == 0 {
		return profileSummary{}
	}
	if err := os.MkdirAll(filepath.Join(out, "profiles"), 0o755); err != nil {
		return profileSummary{text: "Profiles: " + err.Error()}
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("## Where the time goes at N = 100")
	p("")
	p("CPU per task over the N = 100 rounds of each kind, from the machine down: the dev server is a separate process;")
	p("this process's CPU is split by its CPU profile (runtime/pprof), each sample going to the first part, in the order")
	p("of `parts` in bench/parts.go, with a function of it anywhere in the sample's stack — so the ledger's calls made")
	p("inside a model turn are the ledger's. Rows are sorted by capstan − bare.")
	p("Merged profiles: `go tool pprof bench/results/profiles/capstan-n100.pprof` (bare-n100.pprof; capstan-w2-n100.pprof")
	p("and bare-w2-n100.pprof for two workers).")
	byArea := func() {} // one worker's tables by area of code, after both pools' parts
	for _, workers := range pools {
		capstan, bare := r.cell(kindCapstan, workers, 100), r.cell(kindBare, workers, 100)
		read := func(k kind) (cpuProfile, error) {
			name := profileName(k, workers, 100)
			paths, _ := filepath.Glob(filepath.Join(dir, name+"-r*.pprof"))
			if len(paths) == 0 {
				return cpuProfile{}, fmt.Errorf("no %s profile", name)
			}
			return readProfile(paths, filepath.Join(out, "profiles", name+".pprof"))
		}
		cp, err1 := read(kindCapstan)
		bp, err2 := read(kindBare)
		p("")
		p("### %s", workersLabel(workers))
		p("")
		if err := cmp.Or(err1, err2); err != nil {
			p("Profiles could not be read: %v", err)
			continue
		}
		cd, cf := capstan.tasks()
		bd, bf := bare.tasks()
		partsTable(p, capstan, bare, cp.byPart, bp.byPart, cd+cf, bd+bf)
		if workers == 1 {
			byArea = func() { p(""); areaTables(p, cp, bp, cd+cf, bd+bf) }
		}
	}
	byArea()
	return profileSummary{text: strings.TrimRight(w.String(), "\n")}
}

// areaTables writes one worker's profile by area of code (the package that
// spends the CPU, whatever the work is for) and capstan's busiest
// functions.
func areaTables(p func(string, ...any), cp, bp cpuProfile, ct, bt int) {
	per := func(d time.Duration, tasks int) string {
		if tasks == 0 {
			return "–"
		}
		return cpuMS(d / time.Duration(tasks))
	}
	p("### 1 worker, by area of code")
	p("")
	p("The same profiles by the package that spends the CPU, whatever the work is for.")
	p("")
	p("| area | capstan CPU/task | bare CPU/task | capstan − bare |")
	p("| --- | --- | --- | --- |")
	ca, ba := cp.byArea(), bp.byArea()
	perTask := func(m map[string]time.Duration, a string, tasks int) time.Duration {
		return m[a] / time.Duration(max(tasks, 1))
	}
	diff := func(a string) time.Duration { return perTask(ca, a, ct) - perTask(ba, a, bt) }
	names := keysOf(ca)
	for _, a := range keysOf(ba) {
		if _, ok := ca[a]; !ok {
			names = append(names, a)
		}
	}
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(diff(y), diff(x)), cmp.Compare(x, y)) })
	for _, a := range names {
		p("| %s | %s | %s | %s |", a, per(ca[a], ct), per(ba[a], bt), signedMS(diff(a)))
	}
	p("")
	p("Top functions in capstan's profile by own CPU:")
	p("")
	p("| function | CPU/task | share |")
	p("| --- | --- | --- |")
	fns := keysOf(cp.flat)
	slices.SortFunc(fns, func(x, y string) int { return cmp.Compare(cp.flat[y], cp.flat[x]) })
	for _, fn := range fns[:min(12, len(fns))] {
		p("| `%s` | %s | %.1f %% |", fn, per(cp.flat[fn], ct), 100*cp.flat[fn].Seconds()/max(cp.total.Seconds(), 1e-9))
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
