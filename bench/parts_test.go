package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestPartOf(t *testing.T) {
	const (
		ledger    = "the ledger: its reads, writes and fsyncs (SQLite)"
		modelTurn = "model turns: the request, its stream, the transcript"
	)
	for _, tc := range []struct {
		name  string
		stack []string // leaf first
		want  string
	}{
		{"a fsync under a turn's commit is the ledger's",
			[]string{"internal/runtime/syscall/linux.Syscall6", "modernc.org/libc.Xfsync",
				"github.com/capstanhq/capstan/internal/ledger/sqlite.(*Store).CommitTurn",
				"github.com/capstanhq/capstan/internal/activities.(*Activities).ModelTurn", "go.temporal.io/sdk/internal.(*activityTaskPoller).ProcessTask"},
			ledger},
		{"the rest of a turn is the turn's",
			[]string{"encoding/json.Unmarshal", "github.com/capstanhq/capstan/internal/activities.(*Activities).ModelTurn",
				"go.temporal.io/sdk/internal.(*activityTaskPoller).ProcessTask"},
			modelTurn},
		{"bare's turn shares the part's name",
			[]string{"runtime.mallocgc", "main.(*bareActivities).BareModelTurn", "go.temporal.io/sdk/internal.(*activityTaskPoller).ProcessTask"},
			modelTurn},
		{"the SDK around an activity is the SDK's",
			[]string{"google.golang.org/protobuf/proto.Marshal", "go.temporal.io/sdk/internal.(*activityTaskPoller).ProcessTask"},
			"the SDK's activity tasks: polling, running, answering"},
		{"background marking", []string{"runtime.scanobject", "runtime.gcBgMarkWorker"}, "garbage collection (background)"},
		{"nothing known", []string{"sort.Slice", "example.com/x.y"}, "other"},
	} {
		if got := partOf(tc.stack); got != tc.want {
			t.Errorf("%s: partOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// writeProfile writes a CPU profile the way runtime/pprof does, with two
// samples: 30 ms in a system call under the ledger's turn commit, which is
// inlined into ModelTurn, and 10 ms of JSON in ModelTurn itself.
func writeProfile(t *testing.T, path string) {
	t.Helper()
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	syscall := fn(1, "internal/runtime/syscall/linux.Syscall6")
	commit := fn(2, "github.com/capstanhq/capstan/internal/ledger/sqlite.(*Store).CommitTurn")
	turn := fn(3, "github.com/capstanhq/capstan/internal/activities.(*Activities).ModelTurn")
	unmarshal := fn(4, "encoding/json.Unmarshal")
	loc := func(id uint64, fns ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id}
		for _, f := range fns {
			l.Line = append(l.Line, profile.Line{Function: f})
		}
		return l
	}
	l1, l2, l3, l4 := loc(1, syscall), loc(2, commit, turn), loc(3, unmarshal), loc(4, turn)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1, l2}, Value: []int64{3, int64(30 * time.Millisecond)}},
			{Location: []*profile.Location{l3, l4}, Value: []int64{1, int64(10 * time.Millisecond)}},
		},
		Location: []*profile.Location{l1, l2, l3, l4},
		Function: []*profile.Function{syscall, commit, turn, unmarshal},
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReadProfile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pprof")
	writeProfile(t, in)
	got, err := readProfile([]string{in}, filepath.Join(dir, "merged.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if got.total != 40*time.Millisecond {
		t.Errorf("total = %v, want 40ms", got.total)
	}
	const syscall, unmarshal = "internal/runtime/syscall/linux.Syscall6", "encoding/json.Unmarshal"
	if got.flat[syscall] != 30*time.Millisecond || got.flat[unmarshal] != 10*time.Millisecond || len(got.flat) != 2 {
		t.Errorf("flat = %v, want 30ms in the system call and 10ms in json", got.flat)
	}
	if got.byPart["the ledger: its reads, writes and fsyncs (SQLite)"] != 30*time.Millisecond ||
		got.byPart["model turns: the request, its stream, the transcript"] != 10*time.Millisecond || len(got.byPart) != 2 {
		t.Errorf("byPart = %v, want 30ms the ledger's and 10ms the turn's", got.byPart)
	}
	if _, err := os.Stat(filepath.Join(dir, "merged.pprof")); err != nil {
		t.Errorf("no merged profile written: %v", err)
	}
	if _, err := readProfile([]string{filepath.Join(dir, "missing.pprof")}, filepath.Join(dir, "m2.pprof")); err == nil {
		t.Error("readProfile of a missing file gave no error")
	}
}

// TestSummarizeProfiles runs the section over one worker's rounds: capstan's
// profile holds the ledger's 30 ms and a turn's 10 ms, bare's none of it.
func TestSummarizeProfiles(t *testing.T) {
	if got := summarizeProfiles(t.TempDir(), t.TempDir(), &results{load: loadResults{}}); got.text != "" {
		t.Errorf("with no N = 100 rounds the section is %q, want none", got.text)
	}
	dir, out := t.TempDir(), t.TempDir()
	writeProfile(t, filepath.Join(dir, "capstan-n100-r1.pprof"))
	// Bare's profile: a profile with no samples.
	empty := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
	}
	f, err := os.Create(filepath.Join(dir, "bare-n100-r1.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cell := func(k kind, serverCPU, selfCPU time.Duration) *loadStats {
		return &loadStats{loadKey: loadKey{k, 1, 100}, rounds: []round{{
			latencies: []time.Duration{time.Second, time.Second}, wall: time.Second,
			serverCPU: serverCPU, selfCPU: selfCPU,
			host: hostCPU{busy: serverCPU + selfCPU, total: 2 * time.Second},
		}}}
	}
	r := &results{load: loadResults{
		{kindCapstan, 1, 100}: cell(kindCapstan, 100*time.Millisecond, 60*time.Millisecond),
		{kindBare, 1, 100}:    cell(kindBare, 90*time.Millisecond, 20*time.Millisecond),
	}}
	got := summarizeProfiles(dir, out, r).text
	for _, want := range []string{
		"### 1 worker\n",
		// Two tasks: the machine 80 ms a task against 55, the server 50 against 45.
		"| **the machine** (every process and the kernel) | 80.0 ms | 55.0 ms | +25.0 ms |",
		"| · the dev server process | 50.0 ms | 45.0 ms | +5.0 ms |",
		"| · · · the ledger: its reads, writes and fsyncs (SQLite) | 15.0 ms | 0.0 ms | +15.0 ms |",
		"| · · · model turns: the request, its stream, the transcript | 5.0 ms | 0.0 ms | +5.0 ms |",
		"### 1 worker, by area of code",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "### 2 workers") {
		t.Errorf("the section has a 2-worker part with no 2-worker rounds:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(out, "profiles", "capstan-n100.pprof")); err != nil {
		t.Errorf("the merged profile is not kept: %v", err)
	}
}
