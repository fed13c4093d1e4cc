package main

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// profileSummary is the "where the time goes" section: this process's CPU
// profile over the N = 100 rounds on one worker, capstan beside bare, by
// area of code, and the dev server's CPU beside it.
type profileSummary struct {
	text string
}

// areas group functions by the package that spends the CPU, first match
// wins.
var areas = []struct{ name, prefixes string }{
	{"the profiler itself (runtime/pprof, its gzip)", "runtime/pprof. compress/flate.(*compressor) compress/flate.(*huffmanEncoder) compress/flate.(*huffmanBitWriter) compress/gzip.(*Writer)"},
	{"SQLite (modernc.org/sqlite, its libc)", "modernc.org/"},
	{"capstan ledger stores", "github.com/capstanhq/capstan/internal/ledger"},
	{"capstan activities and workflow", "github.com/capstanhq/capstan/activities github.com/capstanhq/capstan/workflows"},
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

// cpuProfile is a merged profile read through `go tool pprof -top`.
type cpuProfile struct {
	total time.Duration
	flat  map[string]time.Duration // by function
	cum   map[string]time.Duration
}

// readProfile merges the profiles at paths and writes the merged profile to
// merged (for `go tool pprof merged`).
func readProfile(paths []string, merged string) (cpuProfile, error) {
	p := cpuProfile{flat: map[string]time.Duration{}, cum: map[string]time.Duration{}}
	out, err := exec.Command("go", append([]string{"tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", "-unit=ms"}, paths...)...).Output()
	if err != nil {
		return p, fmt.Errorf("go tool pprof -top: %w", err)
	}
	if err := exec.Command("go", append([]string{"tool", "pprof", "-proto", "-output=" + merged}, paths...)...).Run(); err != nil {
		return p, fmt.Errorf("go tool pprof -proto: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	header := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if header {
			header = len(f) == 0 || f[0] != "flat"
			continue
		}
		if len(f) < 6 {
			continue
		}
		flat, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		name := strings.Join(f[5:], " ")
		p.flat[name] += flat
		p.cum[name] = max(p.cum[name], cum)
		p.total += flat
	}
	return p, sc.Err()
}

func (p cpuProfile) byArea() map[string]time.Duration {
	m := map[string]time.Duration{}
	for fn, d := range p.flat {
		m[areaOf(fn)] += d
	}
	return m
}

// cumOf is the CPU under the functions whose name contains part.
func (p cpuProfile) cumOf(part string) time.Duration {
	var d time.Duration
	for fn, c := range p.cum {
		if strings.Contains(fn, part) {
			d = max(d, c)
		}
	}
	return d
}

// summarizeProfiles reads the N = 100 profiles of the run's one-worker
// rounds from dir, keeps the merged profiles in out/profiles, and writes
// the section.
func summarizeProfiles(dir, out string, r *results) profileSummary {
	capstan, bare := r.cell(kindCapstan, 1, 100), r.cell(kindBare, 1, 100)
	if capstan == nil || bare == nil {
		return profileSummary{}
	}
	if err := os.MkdirAll(filepath.Join(out, "profiles"), 0o755); err != nil {
		return profileSummary{text: "Profiles: " + err.Error()}
	}
	read := func(k kind) (cpuProfile, int, error) {
		paths, _ := filepath.Glob(filepath.Join(dir, string(k)+"-n100-r*.pprof"))
		if len(paths) == 0 {
			return cpuProfile{}, 0, fmt.Errorf("no %s profile", k)
		}
		p, err := readProfile(paths, filepath.Join(out, "profiles", string(k)+"-n100.pprof"))
		return p, len(paths), err
	}
	cp, rounds, err1 := read(kindCapstan)
	bp, _, err2 := read(kindBare)
	if err := cmp.Or(err1, err2); err != nil {
		return profileSummary{text: "Profiles could not be read: " + err.Error()}
	}
	cd, cf := capstan.tasks()
	bd, bf := bare.tasks()
	ct, bt := cd+cf, bd+bf
	per := func(d time.Duration, tasks int) string {
		if tasks == 0 {
			return "–"
		}
		return cpuMS(d / time.Duration(tasks))
	}

	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("## Where the time goes at N = 100 (1 worker)")
	p("")
	p("CPU per task over the %d N = 100 round(s) of each. The dev server is a separate process; the profile is this", rounds)
	p("process's (runtime/pprof): the worker, but also the sandbox fakes and the driver, shown apart.")
	p("Merged profiles: `go tool pprof bench/results/profiles/capstan-n100.pprof` (and bare-n100.pprof).")
	p("")
	cs, cw := capstan.cpuPerTask()
	bs, bw := bare.cpuPerTask()
	p("| where | capstan CPU/task | bare CPU/task | capstan − bare |")
	p("| --- | --- | --- | --- |")
	p("| dev server process | %s | %s | %s |", cpuMS(cs), cpuMS(bs), cpuMS(cs-bs))
	p("| this process (worker, sandbox, driver) | %s | %s | %s |", cpuMS(cw), cpuMS(bw), cpuMS(cw-bw))
	p("| · of which in the profile, by area: | | | |")
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
	slices.SortFunc(names, func(x, y string) int { return cmp.Compare(diff(y), diff(x)) })
	for _, a := range names {
		p("| · %s | %s | %s | %s |", a, per(ca[a], ct), per(ba[a], bt), cpuMS(diff(a)))
	}
	p("")
	p("Inside capstan's activities (cumulative CPU per task): ModelTurn %s, ExecuteTool %s, Deliver %s; the ledger stores %s, of which SQLite %s.",
		per(cp.cumOf("activities.(*Activities).ModelTurn"), ct), per(cp.cumOf("activities.(*Activities).ExecuteTool"), ct),
		per(cp.cumOf("activities.(*Activities).Deliver"), ct), per(ca["capstan ledger stores"]+ca["SQLite (modernc.org/sqlite, its libc)"], ct),
		per(ca["SQLite (modernc.org/sqlite, its libc)"], ct))
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
	return profileSummary{text: strings.TrimRight(w.String(), "\n")}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
