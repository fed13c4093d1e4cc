package main

import (
	"os"
	"path/filepath"
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
				"github.com/capstanhq/capstan/activities.(*Activities).ModelTurn", "go.temporal.io/sdk/internal.(*activityTaskPoller).ProcessTask"},
			ledger},
		{"the rest of a turn is the turn's",
			[]string{"encoding/json.Unmarshal", "github.com/capstanhq/capstan/activities.(*Activities).ModelTurn",
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

// TestReadProfile writes a two-sample CPU profile the way runtime/pprof
// does and checks that readProfile sums it by leaf function and by part.
func TestReadProfile(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	syscall := fn(1, "internal/runtime/syscall/linux.Syscall6")
	commit := fn(2, "github.com/capstanhq/capstan/internal/ledger/sqlite.(*Store).CommitTurn")
	turn := fn(3, "github.com/capstanhq/capstan/activities.(*Activities).ModelTurn")
	unmarshal := fn(4, "encoding/json.Unmarshal")
	loc := func(id uint64, fns ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id}
		for _, f := range fns {
			l.Line = append(l.Line, profile.Line{Function: f})
		}
		return l
	}
	// Location 2 holds CommitTurn inlined into ModelTurn.
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
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pprof")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readProfile([]string{in}, filepath.Join(dir, "merged.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if got.total != 40*time.Millisecond {
		t.Errorf("total = %v, want 40ms", got.total)
	}
	if got.flat[syscall.Name] != 30*time.Millisecond || got.flat[unmarshal.Name] != 10*time.Millisecond || len(got.flat) != 2 {
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
