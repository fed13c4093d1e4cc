package activities_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// readme is the file every turn of a measured task reads: about 1.5 KB of
// prose, so each turn stores a tool message of a realistic size.
var readme = strings.Repeat("Capstan runs agent tasks on Temporal: every side effect happens at most once, and is known to have happened.\n", 14)

// task drives a sandbox:turns-N task turn by turn as the workflow does,
// through the real ModelTurn and ExecuteTool activities and the fixture's
// real SQLite ledger: each turn's model answer reads README.md of the
// sandbox's demo repository, and the next turn appends the tool message.
type task struct {
	f          *fixture
	n          int      // the script's turns
	turn       int      // turns run
	transcript string   // the manifest the last turn committed
	append     []string // tool messages since
	tools      []string // every tool message, in order
	manifests  []string // the manifest each turn committed
}

// newTask writes readme into the demo repository (through ExecuteTool, as
// a task would) and returns a task of n turns, none run yet.
func newTask(tb testing.TB, f *fixture, n int) *task {
	tb.Helper()
	args, err := json.Marshal(map[string]string{"repo": "capstan-sandbox/demo", "branch": "main", "path": "README.md", "content": readme, "message": "a longer README"})
	if err != nil {
		tb.Fatal(err)
	}
	res := f.executeTool(tb, contract.ExecuteToolInput{Tenant: "default", TaskID: "setup", TurnID: "setup/t1", ToolCallID: "call_put",
		OperationID: "default:setup:github_put_file:readme", Tool: githubtools.NamePutFile, Arguments: f.args(tb, string(args))})
	if res.State != capstan.OutcomeSucceeded {
		tb.Fatalf("put README = %+v", res)
	}
	return &task{f: f, n: n}
}

// executeTool runs ExecuteTool and returns its result.
func (f *fixture) executeTool(tb testing.TB, in contract.ExecuteToolInput) contract.ExecuteToolResult {
	tb.Helper()
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		tb.Fatal(err)
	}
	var res contract.ExecuteToolResult
	if err := v.Get(&res); err != nil {
		tb.Fatal(err)
	}
	return res
}

// step runs the task's next turn and its tool calls.
func (k *task) step(tb testing.TB) {
	tb.Helper()
	k.turn++
	turnID := fmt.Sprintf("T/t%d", k.turn)
	in := contract.ModelTurnInput{TaskID: "T", TurnID: turnID, AttemptID: turnID + "/a1", Model: "sandbox:turns-" + strconv.Itoa(k.n),
		Transcript: k.transcript, Append: k.append}
	if k.turn == 1 {
		in.Seed = []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "Read the README, again and again."}}
	}
	v, err := k.f.env.ExecuteActivity(k.f.acts.ModelTurn, in)
	if err != nil {
		tb.Fatal(err)
	}
	var out contract.ModelTurnResult
	if err := v.Get(&out); err != nil {
		tb.Fatal(err)
	}
	// The script answers by the number of assistant messages it is sent,
	// so a turn that loaded a transcript short of an item says so here.
	if k.turn < k.n && !strings.HasPrefix(out.Text, fmt.Sprintf("Turn %d:", k.turn)) {
		tb.Fatalf("turn %d answered %q", k.turn, out.Text)
	}
	k.transcript, k.append = out.Transcript, nil
	k.manifests = append(k.manifests, out.Transcript)
	for i, c := range out.ToolCalls {
		res := k.f.executeTool(tb, contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: turnID, ToolCallID: c.ID,
			OperationID: strings.Join([]string{"default", "T", turnID, c.Name, strconv.Itoa(i)}, ":"), Tool: c.Name, Arguments: c.Arguments})
		if res.State != capstan.OutcomeSucceeded {
			tb.Fatalf("turn %d: %s = %+v", k.turn, c.Name, res)
		}
		k.append = append(k.append, res.Item)
		k.tools = append(k.tools, res.Item)
	}
}

// ledgerBytes is what a task stored in the ledger.
type ledgerBytes struct {
	Items     int64 // the sum of the stored items' lengths
	Manifests int64 // of which the turns' manifests
	File      int64 // the SQLite file, its write-ahead log checkpointed
}

// bytes measures the ledger: the items table through SQL, the file after a
// checkpoint, the manifests through the store.
func (k *task) bytes(tb testing.TB) ledgerBytes {
	tb.Helper()
	ctx := context.Background()
	var b ledgerBytes
	for _, ref := range k.manifests {
		data, err := k.f.ledger.GetItem(ctx, ref)
		if err != nil {
			tb.Fatal(err)
		}
		b.Manifests += int64(len(data))
	}
	db, err := sql.Open("sqlite", k.f.path)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if err := db.QueryRowContext(ctx, "SELECT coalesce(sum(length(data)), 0) FROM items").Scan(&b.Items); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		tb.Fatal(err)
	}
	for _, p := range []string{k.f.path, k.f.path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			b.File += st.Size()
		}
	}
	return b
}

// The bytes a task's manifests take grow linearly with its turns: each
// turn's manifest is about the same size whatever the turn, so the second
// hundred turns store no more than the first. Before manifests were
// chained, each turn wrote the whole list of the transcript's references
// (about 150 bytes a turn more than the last) and the second hundred turns
// stored three times the first. The transcript loads whole all along.
func TestTranscriptManifestsGrowLinearly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	k := newTask(t, f, 1000)
	for k.turn < 100 {
		k.step(t)
	}
	first := k.bytes(t)
	for k.turn < 200 {
		k.step(t)
	}
	both := k.bytes(t)
	t.Logf("after 100 turns %+v, after 200 %+v", first, both)
	if second := both.Manifests - first.Manifests; float64(second) > 1.25*float64(first.Manifests) {
		t.Errorf("turns 101-200 stored %d bytes of manifests, turns 1-100 %d: want linear growth", second, first.Manifests)
	}
	const perTurn = 2048 // a manifest's bytes a turn, at most on average
	if both.Manifests > perTurn*200 {
		t.Errorf("200 turns stored %d bytes of manifests, want at most %d a turn", both.Manifests, perTurn)
	}

	refs, err := f.acts.ManifestRefs(context.Background(), k.transcript)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2+2*200-1 {
		t.Fatalf("the transcript of 200 turns has %d items, want %d", len(refs), 2+2*200-1)
	}
	for i, impl := range k.tools[:199] { // seed, then an assistant item and its tool message a turn
		if refs[3+2*i] != impl {
			t.Fatalf("item %d is %s, want turn %d's tool message %s", 3+2*i, refs[3+2*i], i+1, impl)
		}
	}
}

// A manifest written before manifests were chained — the whole list of a
// transcript's references — still loads, and the turns after it extend it
// by links: a task in flight when its workers are upgraded goes on. A
// worker not yet upgraded fails on a link rather than misread it.
func TestOldWholeListManifestIsExtended(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := overflowing()
	for len(msgs) <= activities.SegmentItems {
		msgs = append(msgs, msgs[2:6]...)
	}
	old := f.transcript(t, msgs...) // {"items": [...]}, as every manifest was
	impl := func(s string) string {
		return f.args(t, `{"role":"tool","content":"`+s+`","tool_call_id":"call_2"}`)
	}
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t9", AttemptID: "T/t9/a1", Model: "sandbox:hello", Transcript: old, Append: []string{impl("one")}}
	first := f.modelTurn(t, in)
	in = contract.ModelTurnInput{TaskID: "T", TurnID: "T/t10", AttemptID: "T/t10/a1", Model: "sandbox:hello", Transcript: first.Transcript, Append: []string{impl("two")}}
	second := f.modelTurn(t, in)

	for _, c := range []struct {
		ref   string
		items int
	}{{first.Transcript, 2}, {second.Transcript, 4}} {
		data, err := f.ledger.GetItem(context.Background(), c.ref)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Items struct {
				Base  string
				Count int
				Refs  []string
			}
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if m.Items.Base != old || m.Items.Count != len(msgs)+c.items || len(m.Items.Refs) != c.items {
			t.Errorf("manifest %s, want a link to the old manifest %s with %d items of its own", data, old, c.items)
		}
		// A worker from before links decodes a manifest so: it must fail,
		// not load the link's items as the whole transcript.
		var before struct {
			Items []string `json:"items"`
		}
		if err := json.Unmarshal(data, &before); err == nil {
			t.Errorf("a worker from before links reads manifest %s as %d items", data, len(before.Items))
		}
	}
	got := f.messages(t, second.Transcript)
	if len(got) != len(msgs)+4 || got[len(msgs)-1].Content != msgs[len(msgs)-1].Content ||
		got[len(msgs)].Content != "one" || got[len(msgs)+2].Content != "two" || got[len(msgs)+3].Role != model.RoleAssistant {
		t.Errorf("transcript = %+v, want the old one's %d items, then two turns", got, len(msgs))
	}
}

// modelTurn runs ModelTurn and returns its result.
func (f *fixture) modelTurn(t testing.TB, in contract.ModelTurnInput) contract.ModelTurnResult {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.ModelTurnResult
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A chain that does not add up to the count its head states is refused,
// never loaded as a shorter transcript.
func TestBrokenManifestChainIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.transcript(t, overflowing()...)
	item := f.args(t, `{"role":"user","content":"x"}`)
	for _, m := range []string{
		`{"items":{"base":"` + old + `","count":9,"refs":["` + item + `"]}}`, // the base names 6, not 8
		`{"items":{"base":"` + old + `","count":0,"refs":["` + item + `"]}}`, // fewer than its own
		`{"items":{"count":1,"refs":["` + item + `"]}}`,                      // a link without a base
	} {
		if _, err := f.acts.ManifestRefs(context.Background(), f.args(t, m)); err == nil || !strings.Contains(err.Error(), "chain is broken") {
			t.Errorf("manifest %s: err = %v, want a broken chain", m, err)
		}
	}
	if _, err := f.acts.ManifestRefs(context.Background(), ledger.ItemRef([]byte("never stored"))); err == nil {
		t.Error("a manifest that is not stored loaded")
	}
}

// readCounter counts the items the activities read from the ledger.
type readCounter struct {
	activities.Ledger
	reads atomic.Int64
}

func (r *readCounter) GetItem(ctx context.Context, ref string) ([]byte, error) {
	r.reads.Add(1)
	return r.Ledger.GetItem(ctx, ref)
}

// BenchmarkTranscript1000Turns runs a 1,000-turn task (turns-1000, each
// turn reading a 1.5 KB README) and reports what its ledger holds: the
// stored items' bytes, the manifests' share of them, and the SQLite file;
// and what loading the last turn's transcript costs: the manifests it
// reads, and the time to read them and every item, beside the time to load
// the same transcript from one whole-list manifest. Run it with
// -benchtime=1x; it takes minutes.
func BenchmarkTranscript1000Turns(b *testing.B) {
	for range b.N {
		var counter readCounter
		f := newFixture(b, func(d *activities.Deps) { counter.Ledger, d.Ledger = d.Ledger, &counter })
		k := newTask(b, f, 1000)
		for k.turn < 1000 {
			k.step(b)
		}
		got := k.bytes(b)
		b.ReportMetric(float64(got.Items), "item-bytes")
		b.ReportMetric(float64(got.Manifests), "manifest-bytes")
		b.ReportMetric(float64(got.File), "file-bytes")
		ctx := context.Background()
		before := counter.reads.Load()
		refs, err := f.acts.ManifestRefs(ctx, k.transcript)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(counter.reads.Load()-before), "manifest-reads")
		b.ReportMetric(float64(len(refs)), "items")
		// The same transcript as one whole list, as before links, loaded
		// in turn with the chain so both see the same machine.
		whole, err := json.Marshal(map[string][]string{"items": refs})
		if err != nil {
			b.Fatal(err)
		}
		chain, list := k.transcript, f.args(b, string(whole))
		var took [2]time.Duration
		const loads = 10
		for range loads {
			for i, ref := range []string{chain, list} {
				start := time.Now()
				loadAll(b, f, ref)
				took[i] += time.Since(start)
			}
		}
		b.ReportMetric(float64(took[0].Microseconds())/loads, "load-µs")
		b.ReportMetric(float64(took[1].Microseconds())/loads, "load-whole-list-µs")
	}
}

// loadAll reads the transcript a manifest names, as loadTranscript does:
// its manifests, then every item.
func loadAll(tb testing.TB, f *fixture, manifest string) {
	tb.Helper()
	ctx := context.Background()
	refs, err := f.acts.ManifestRefs(ctx, manifest)
	if err != nil {
		tb.Fatal(err)
	}
	for _, ref := range refs {
		if _, err := f.ledger.GetItem(ctx, ref); err != nil {
			tb.Fatal(err)
		}
	}
}

// itemReads counts the calls that read transcript items from the ledger.
type itemReads struct {
	activities.Ledger
	calls atomic.Int64
}

func (r *itemReads) GetItem(ctx context.Context, ref string) ([]byte, error) {
	r.calls.Add(1)
	return r.Ledger.GetItem(ctx, ref)
}

func (r *itemReads) GetItems(ctx context.Context, refs []string) ([][]byte, error) {
	r.calls.Add(1)
	return r.Ledger.GetItems(ctx, refs)
}

// A turn reads its transcript's items in one ledger call, not one per
// item: what a turn costs the ledger grows with its manifest's links (one
// read each), not with the transcript's length. Measured on a worker that
// holds none of the items (the one that ran the turns reads them from
// memory: itemCache).
func TestTranscriptLoadsItsItemsInOneRead(t *testing.T) {
	t.Parallel()
	reads := &itemReads{}
	f := newFixture(t, func(d *activities.Deps) { reads.Ledger = d.Ledger; d.Ledger = reads })
	k := newTask(t, f, 1000)
	perTurn := map[int]int64{}
	items := 0
	for k.turn < 100 {
		k.step(t)
		if k.turn%10 != 0 {
			continue
		}
		fresh, err := activities.New(activities.Deps{Ledger: reads, Tools: tool.NewRegistry(), Identity: "another-worker"})
		if err != nil {
			t.Fatal(err)
		}
		before := reads.calls.Load()
		if items, err = fresh.LoadTranscript(context.Background(), k.transcript); err != nil {
			t.Fatal(err)
		}
		perTurn[k.turn] = reads.calls.Load() - before
	}
	t.Logf("ledger item reads a transcript load: turn 10 %d, turn 50 %d, turn 100 %d (%d transcript items)", perTurn[10], perTurn[50], perTurn[100], items)
	if perTurn[100] > int64(items/4) || perTurn[100] == 0 {
		t.Errorf("loading turn 100's transcript read the ledger %d times for %d items: want about one read per manifest link, not one per item", perTurn[100], items)
	}
}
