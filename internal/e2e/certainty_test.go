package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/sandbox"
)

// certaintyRows are the faults of issue 18, each with the default
// consistency window (config.DefaultReconcileWindow), so that what is
// measured is what a user waits: from the fault to the faulted operation
// being settled in the ledger.
func certaintyRows() []faultRow {
	w := config.DefaultReconcileWindow
	const post = "chat.postMessage"
	return []faultRow{
		{name: "pulls.create_502", fault: "PR create: 502 before acting", endpoint: "pulls/create", window: w, want: settleAny,
			github: []sandbox.FaultRule{{Endpoint: "pulls/create", Kind: sandbox.FaultFail, Status: 502, Times: 1}}},
		{name: "pulls.create_drop", fault: "PR create: act, answer lost", endpoint: "pulls/create", window: w, want: settleAny,
			github: []sandbox.FaultRule{{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1}}},
		{name: "pulls.create_late", fault: "PR create: act, answer " + heldPast.String() + " late", endpoint: "pulls/create", window: w,
			want: settleAny, slow: true,
			github: []sandbox.FaultRule{{Endpoint: "pulls/create", Kind: sandbox.FaultDelay, Times: 1, Delay: heldPast}}},
		{name: "git.create-ref_502", fault: "branch create: 502 before acting", endpoint: "git/create-ref", window: w, want: settleAny,
			github: []sandbox.FaultRule{{Endpoint: "git/create-ref", Kind: sandbox.FaultFail, Status: 502, Times: 1}}},
		{name: "contents_drop", fault: "file write: act, answer lost", endpoint: "repos/create-or-update-file-contents", window: w,
			want:   settleAny,
			github: []sandbox.FaultRule{{Endpoint: "repos/create-or-update-file-contents", Kind: sandbox.FaultDrop, Times: 1}}},
		{name: "comment_drop", fault: "comment: act, answer lost", endpoint: "issues/create-comment", window: w, want: settleAny,
			github: []sandbox.FaultRule{{Endpoint: "issues/create-comment", Kind: sandbox.FaultDrop, Times: 1}}},
		{name: "chat.postMessage_drop", fault: "Slack post: act, answer lost", endpoint: post, window: w, want: settleAny,
			slack: []sandbox.FaultRule{{Endpoint: post, Kind: sandbox.FaultDrop, Times: 1}}},
		{name: "sigterm_pulls.create", fault: "SIGTERM mid PR create", endpoint: "pulls/create", window: w,
			stop: syscall.SIGTERM, want: settleAny},
	}
}

// TestLongTimeToCertainty runs the faults of issue 18 end to end with the
// default consistency window and logs, per fault, the time from the fault
// (the faulted request reaching the sandbox, or the signal) to the faulted
// operation's last ledger record (its settled state), and to the task's
// completion. Every row still demands exactly one of each effect.
// A measurement, which `make bench` takes three times: a long run, in
// `make test-long`; TestFaultTable covers its faults in `make test`.
func TestLongTimeToCertainty(t *testing.T) {
	requireLong(t)
	rows := certaintyRows()
	reports := make([]faultReport, len(rows))
	failed := make([]bool, len(rows))
	var wg sync.WaitGroup
	for i, row := range rows {
		wg.Go(func() {
			t.Run(row.name, func(t *testing.T) {
				rep := faultReport{fault: row.fault, outcome: "row failed"}
				defer func() { reports[i], failed[i] = rep, t.Failed() }()
				runFaultRow(t, 40+i, row, &rep)
				if limit := certaintyLimit(row); !t.Failed() && rep.settled > limit {
					t.Errorf("%s settled %s after the fault, want within %s", row.fault, rep.settled, limit)
				}
			})
		})
	}
	wg.Wait()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\teffects\toutcome\tfault → settled\tfault → done")
	for i, r := range reports {
		if r.fault == "" {
			continue
		}
		if failed[i] {
			r.outcome = "ROW FAILED: " + r.outcome
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.fault, r.effects, r.outcome,
			r.settled.Round(100*time.Millisecond), r.fromFault.Round(100*time.Millisecond))
	}
	_ = tw.Flush()
	t.Logf("time to certainty (reconcile window %s):\n%s", config.DefaultReconcileWindow, b.String())
	writeCertainty(t, rows, reports, failed)
}

// certaintyFigure is one row's figures as TestLongTimeToCertainty hands them
// to the bench (CAPSTAN_CERTAINTY_OUT): one JSON object a line.
type certaintyFigure struct {
	Name      string  `json:"name"`
	Fault     string  `json:"fault"`
	SettledMS float64 `json:"settled_ms"` // fault → settled
	DoneMS    float64 `json:"done_ms"`    // fault → task done
	Failed    bool    `json:"failed"`
}

// writeCertainty appends the run's figures to the file
// CAPSTAN_CERTAINTY_OUT names, when it names one: how `make bench`
// (bench/certainty.go) measures time to certainty with this test's faults.
func writeCertainty(t *testing.T, rows []faultRow, reports []faultReport, failed []bool) {
	file := os.Getenv("CAPSTAN_CERTAINTY_OUT")
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for i, r := range reports {
		if r.fault == "" {
			continue // not run (-run chose other rows)
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		if err := enc.Encode(certaintyFigure{Name: rows[i].name, Fault: r.fault, SettledMS: ms(r.settled), DoneMS: ms(r.fromFault), Failed: failed[i]}); err != nil {
			t.Fatal(err)
		}
	}
}

// settledAt is the last ledger record of the operation row faults: when it
// was settled.
func settledAt(t *testing.T, env []string, taskID string, row faultRow) time.Time {
	t.Helper()
	name := heldOperation[row.endpoint]
	if impl, ok := toolOfEndpoint[row.endpoint]; ok {
		name = ":" + impl + ":"
	}
	rows := ledgerRows(t, env, taskID)
	i := slices.IndexFunc(rows, func(op ledgerRow) bool { return strings.Contains(op.ID, name) })
	if i < 0 {
		t.Errorf("no ledger row of %s among %+v", name, rows)
		return time.Time{}
	}
	return rows[i].UpdatedAt
}

// describeSettlement says, for settleAny, how the journal shows the faulted
// operation was settled.
func describeSettlement(journal []string) string {
	var how []string
	for _, l := range journal {
		for _, w := range []string{" is unknown", " recovered", " is absent", " executing it again"} {
			if strings.Contains(l, w) && !slices.Contains(how, strings.TrimSpace(w)) {
				how = append(how, strings.TrimSpace(w))
			}
		}
	}
	sort.Strings(how)
	if len(how) == 0 {
		return "settled in the attempt"
	}
	return strings.Join(how, ", ")
}

// certaintyLimit is how soon after its fault a row's operation must be
// settled (issue 18): a conditional or idempotent write within 5 s of the
// moment the sandbox acted or refused — for an answer held back, of the
// write timeout (15 s) — and the rest within the consistency window.
func certaintyLimit(row faultRow) time.Duration {
	const soon = 5 * time.Second
	switch {
	case row.stop != 0:
		// Within its stop timeout the held call may still finish; then the
		// attempt hands it on at once (activities.HandOff) and a lookup
		// finds it — the heartbeat timeout is not waited for.
		return faultStopTimeout + soon
	case row.endpoint == "chat.postMessage", row.endpoint == "issues/create-comment":
		return row.window + soon
	case row.slow:
		return 15*time.Second + soon // CAPSTAN_GITHUB_WRITE_TIMEOUT's default
	}
	return soon
}
