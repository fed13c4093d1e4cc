package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The fault table (issue 6): every fault the sandbox can inject, on every
// endpoint the review script writes through, plus a worker killed or stopped
// in the middle of a write. Each row runs the real worker and starter
// binaries against a sandbox of its own, on a task queue and ledger of its
// own, so rows are independent and run side by side.
const (
	faultRepo    = "capstan-sandbox/demo"
	faultChannel = "#capstan-faults"
	// faultHeartbeat is CAPSTAN_HEARTBEAT_TIMEOUT: how fast a dead worker
	// is noticed, and so how long its claim's lease lives unrenewed.
	faultHeartbeat = 3 * time.Second
	// faultWindow is CAPSTAN_RECONCILE_WINDOW: how long an unseen effect
	// counts as "not yet" before it is absent.
	faultWindow = 2 * time.Second
	// lagged is how far a lagging list trails the writes in the lag rows;
	// their window must be longer, or the reconciler would conclude absent
	// while the list still hides the effect.
	lagged    = 5 * time.Second
	lagWindow = 15 * time.Second
	// retryAfter is what the rate-limit rows tell the client to wait.
	retryAfter = 2 * time.Second
	// heldPast is how long a delay fault holds the answer of a write that
	// has acted. What ends such an attempt is the worker's write timeout
	// (CAPSTAN_GITHUB_WRITE_TIMEOUT, CAPSTAN_SLACK_WRITE_TIMEOUT, 15 s;
	// before them a fixed minute): it is shorter than the tool
	// activities' start-to-close (2 min) and equal to the delivery's, and
	// the activities heartbeat on a ticker while the call hangs, so the
	// heartbeat timeout never fires for a live worker. The client gives up,
	// the outcome is unknown, and the reconciler must find the effect.
	heldPast = 90 * time.Second
	// faultStopTimeout is the --stop-timeout of a worker stopped with
	// SIGTERM: how long its running activities may finish before their
	// contexts are cancelled.
	faultStopTimeout = 2 * time.Second
	// rowsAtOnce bounds the rows that run together: the minute-long delay
	// rows start first and mostly wait, so the rest run beside them.
	rowsAtOnce = 7
)

// settlement is how the faulted operation must end up settled.
type settlement int

const (
	settleNormally       settlement = iota // no fault: nothing unknown
	settleFound                            // unknown → the reconciler found the effect
	settleResent                           // unknown → the reconciler saw it absent → sent again with the same id
	settleAfterWait                        // refused, so not sent → sent again after the service's wait
	settleReadBack                         // answer lost → the attempt read the write back: in place
	settleReadBackAbsent                   // 5xx → the attempt read the write back: not in place → written again
	settleByPerson                         // unknown, the reconciler cannot ask → a person resolves it found
	settleAny                              // however it is settled: only the effects and the times are checked
	settleSentAgain                        // unknown → the reconciler saw none, sent it again with the same id → found (issue 18)
)

// resentByReconciler are the endpoints whose ambiguous writes a reconciler
// settles by sending them again (tools.Settler): GitHub holds one open pull
// request per head and base, one branch per name.
var resentByReconciler = map[string]bool{"pulls/create": true, "git/create-ref": true}

// faultRow is one row of the table.
type faultRow struct {
	name     string // subtest name
	fault    string // the fault, as the table prints it
	endpoint string // the faulted endpoint; its first request marks the fault ("" for none)
	github   []sandbox.FaultRule
	slack    []sandbox.FaultRule
	window   time.Duration // CAPSTAN_RECONCILE_WINDOW
	// list is the lagging list of a lag row: the reconciler must ask it
	// more than once before it finds the effect.
	list string
	// stop, when set, is sent to the first worker once the endpoint has
	// acted and while its answer is held back; a second worker on the same
	// queue and ledger then finishes the task.
	stop syscall.Signal
	want settlement
	slow bool // takes over a minute; started first
}

// faultReport is one line of the table.
type faultReport struct {
	fault     string
	effects   string
	outcome   string
	total     time.Duration // task start to completion
	fromFault time.Duration // the fault (first faulted request, or the signal) to completion
	settled   time.Duration // the fault to the faulted operation's last ledger record
}

// TestFaultTable runs every fault of issue 6 end to end and checks, for
// every row, that the sandbox counted exactly one branch, one file write,
// one pull request, one comment and one Slack message, that the task
// completed, and how the faulted operation was settled. It logs the table:
// fault | effects counted | outcome | time to recover.
//
// The rows run rowsAtOnce at a time, each t.Run on a goroutine of its own:
// t.Parallel would hold them to -test.parallel, GOMAXPROCS by default (2 on
// the CI machine), and the table would take minutes of mostly waiting.
//
// Not t.Parallel: its rows already run side by side, and a row's worker
// must heartbeat within 3 seconds (a starved one loses its activity to the
// heartbeat timeout before the row's signal), so the table runs while no
// other test of the package loads the machine.
func TestFaultTable(t *testing.T) {
	rows := faultRows()
	slices.SortStableFunc(rows, func(a, b faultRow) int { // the slow rows first
		switch {
		case a.slow == b.slow:
			return 0
		case a.slow:
			return -1
		default:
			return 1
		}
	})
	reports := make([]faultReport, len(rows))
	failed := make([]bool, len(rows))
	sem := make(chan struct{}, rowsAtOnce)
	var wg sync.WaitGroup
	for i, row := range rows {
		sem <- struct{}{} // taken here, so the rows start in order
		wg.Go(func() {
			defer func() { <-sem }()
			// Run may be called from several goroutines at once; it
			// returns when the row is over.
			t.Run(row.name, func(t *testing.T) {
				rep := faultReport{fault: row.fault, outcome: "row failed"}
				defer func() { reports[i], failed[i] = rep, t.Failed() }()
				runFaultRow(t, i, row, &rep)
			})
		})
	}
	wg.Wait()

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\teffects counted (branch/file/PR/comment/Slack)\toutcome\ttask start → done\tfault → done")
	for i, r := range reports {
		if r.fault == "" {
			continue // not run: filtered out by -run
		}
		from := "—"
		if r.fromFault > 0 {
			from = r.fromFault.Round(100 * time.Millisecond).String()
		}
		total := r.total.Round(100 * time.Millisecond).String()
		if failed[i] {
			r.outcome = "ROW FAILED: " + r.outcome
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.fault, r.effects, r.outcome, total, from)
	}
	_ = tw.Flush()
	t.Logf("fault table (heartbeat timeout %s, reconcile window %s, %s in the lag rows):\n%s",
		faultHeartbeat, faultWindow, lagWindow, b.String())
}

// faultRows builds the table: for each write of the review script, each
// fault the sandbox injects on it; the same for the Slack post; then the
// stopped and killed workers, a reconciler that cannot ask, and a baseline.
func faultRows() []faultRow {
	rows := []faultRow{{name: "baseline", fault: "none (baseline)", want: settleNormally}}
	writes := []struct {
		endpoint string
		list     string // the list its reconciler asks ("" for none)
		readBack bool   // an idempotent write its attempt reads back
	}{
		{"git/create-ref", "git/get-ref", false},
		{"repos/create-or-update-file-contents", "", true},
		{"pulls/create", "pulls/list", false},
		{"issues/create-comment", "issues/list-comments", false},
	}
	for _, w := range writes {
		fail, lost := settleResent, settleFound
		if resentByReconciler[w.endpoint] {
			fail = settleSentAgain
		}
		if w.readBack {
			fail, lost = settleReadBackAbsent, settleReadBack
		}
		ep := w.endpoint
		slug := strings.ReplaceAll(ep, "/", ".") // a subtest name has no "/" of its own
		rows = append(rows,
			faultRow{name: slug + "_fail", fault: ep + ": 500 before acting", endpoint: ep, want: fail,
				github: []sandbox.FaultRule{{Endpoint: ep, Kind: sandbox.FaultFail, Times: 1}}},
			faultRow{name: slug + "_drop", fault: ep + ": act, drop the connection", endpoint: ep, want: lost,
				github: []sandbox.FaultRule{{Endpoint: ep, Kind: sandbox.FaultDrop, Times: 1}}},
			faultRow{name: slug + "_delay", fault: ep + ": act, answer after " + heldPast.String(), endpoint: ep, want: lost, slow: true,
				github: []sandbox.FaultRule{{Endpoint: ep, Kind: sandbox.FaultDelay, Times: 1, Delay: heldPast}}},
			faultRow{name: slug + "_secondary_rate_limit", fault: ep + ": 403 secondary rate limit, Retry-After " + retryAfter.String(),
				endpoint: ep, want: settleAfterWait,
				github: []sandbox.FaultRule{{Endpoint: ep, Kind: sandbox.FaultSecondaryRateLimit, Times: 1, RetryAfter: retryAfter}}},
		)
		// A file write is settled by reading the file back within the
		// attempt, and that read (repos/get-content) does not lag: the
		// file has no lag row.
		if w.list != "" {
			rows = append(rows, faultRow{name: slug + "_lag", fault: ep + ": act, drop; " + w.list + " lags " + lagged.String(),
				endpoint: ep, list: w.list, window: lagWindow, want: settleFound,
				github: []sandbox.FaultRule{
					{Endpoint: w.list, Kind: sandbox.FaultLag, Lag: lagged},
					{Endpoint: ep, Kind: sandbox.FaultDrop, Times: 1},
				}})
		}
	}
	const post = "chat.postMessage"
	rows = append(rows,
		faultRow{name: "chat.postMessage_fail", fault: post + ": 500 before acting", endpoint: post, want: settleResent,
			slack: []sandbox.FaultRule{{Endpoint: post, Kind: sandbox.FaultFail, Times: 1}}},
		faultRow{name: "chat.postMessage_drop", fault: post + ": act, drop the connection", endpoint: post, want: settleFound,
			slack: []sandbox.FaultRule{{Endpoint: post, Kind: sandbox.FaultDrop, Times: 1}}},
		faultRow{name: "chat.postMessage_delay", fault: post + ": act, answer after " + heldPast.String(), endpoint: post, want: settleFound, slow: true,
			slack: []sandbox.FaultRule{{Endpoint: post, Kind: sandbox.FaultDelay, Times: 1, Delay: heldPast}}},
		faultRow{name: "chat.postMessage_ratelimited", fault: post + ": 429 ratelimited, Retry-After " + retryAfter.String(),
			endpoint: post, want: settleAfterWait,
			slack: []sandbox.FaultRule{{Endpoint: post, Kind: sandbox.FaultRateLimit, Times: 1, RetryAfter: retryAfter}}},
		faultRow{name: "chat.postMessage_lag", fault: post + ": act, drop; conversations.history lags " + lagged.String(),
			endpoint: post, list: "conversations.history", window: lagWindow, want: settleFound,
			slack: []sandbox.FaultRule{
				{Endpoint: "conversations.history", Kind: sandbox.FaultLag, Lag: lagged},
				{Endpoint: post, Kind: sandbox.FaultDrop, Times: 1},
			}},
		faultRow{name: "sigkill_pulls.create", fault: "SIGKILL after pulls/create acted, before the ledger recorded it",
			endpoint: "pulls/create", stop: syscall.SIGKILL, want: settleFound},
		faultRow{name: "sigkill_chat.postMessage", fault: "SIGKILL after chat.postMessage acted",
			endpoint: post, stop: syscall.SIGKILL, want: settleFound},
		faultRow{name: "sigterm_pulls.create", fault: "SIGTERM while pulls/create is answered (stop timeout " + faultStopTimeout.String() + ")",
			endpoint: "pulls/create", stop: syscall.SIGTERM, want: settleFound},
		faultRow{name: "pulls.create_cannot_ask", fault: "pulls/create: act, drop; pulls/list 500 throughout",
			endpoint: "pulls/create", want: settleByPerson,
			github: []sandbox.FaultRule{
				{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
				{Endpoint: "pulls/list", Kind: sandbox.FaultFail},
			}},
	)
	return rows
}

// runFaultRow runs one row and fills in its report.
func runFaultRow(t *testing.T, i int, row faultRow, rep *faultReport) {
	sb := startSandbox(t)
	for _, r := range row.github {
		if err := sb.GitHub.AddFault(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range row.slack {
		if err := sb.Slack.AddFault(r); err != nil {
			t.Fatal(err)
		}
	}
	hold := ""
	if row.stop != 0 {
		hold = row.endpoint
	}
	ghSeen, slackSeen := watchRequests(t, hold), watchRequests(t, hold)
	sb.GitHub.SetFault(ghSeen.fault)
	sb.Slack.SetFault(slackSeen.fault)
	seen := ghSeen
	if strings.HasPrefix(row.endpoint, "chat.") {
		seen = slackSeen
	}
	listSeen := ghSeen
	if strings.HasPrefix(row.list, "conversations.") {
		listSeen = slackSeen
	}

	window := row.window
	if window == 0 {
		window = faultWindow
	}
	queue := fmt.Sprintf("e2e-faults-%02d", i)
	env := append(endpointEnv(t, queue, sb),
		"CAPSTAN_HEARTBEAT_TIMEOUT="+faultHeartbeat.String(), "CAPSTAN_RECONCILE_WINDOW="+window.String())
	var workerArgs []string
	if row.stop == syscall.SIGTERM {
		workerArgs = []string{"--stop-timeout", faultStopTimeout.String()}
	}
	first := startWorker(t, env, workerArgs...)

	taskID := fmt.Sprintf("ft%02d-%d", i, time.Now().UnixNano())
	if r := runStarter(t, env, "run",
		"--prompt", "Add a HELLO.md greeting, open a pull request, ask for review and tell the team.",
		"--repo", faultRepo, "--base", "main", "--slack", faultChannel,
		"--model", "openai:review", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	var faultAt time.Time
	switch {
	case row.stop != 0:
		select {
		case <-seen.acted:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s was never called", row.endpoint)
		}
		effect := sb.GitHub.Stats().PullRequestsCreated
		if row.endpoint == "chat.postMessage" {
			effect = sb.Slack.Stats().MessagesPosted
		}
		if effect != 1 {
			t.Fatalf("%s acted, but the sandbox counts %d of its effect, want 1", row.endpoint, effect)
		}
		// The answer is held, so the ledger has the operation RUNNING,
		// not yet recorded, when the worker goes.
		rows := ledgerRows(t, env, taskID)
		held := slices.IndexFunc(rows, func(op ledgerRow) bool { return strings.Contains(op.ID, heldOperation[row.endpoint]) })
		if held < 0 || rows[held].State != capstan.OutcomeRunning {
			t.Fatalf("ledger rows %+v while %s holds its answer; want its operation RUNNING", rows, row.endpoint)
		}
		// A stopped worker's pool goes on polling: the worker that takes
		// over polls before the signal, so a SIGTERM row measures the
		// hand-off, not a worker's start. (A SIGKILL row starts it after.)
		var next *workerProcess
		if row.stop == syscall.SIGTERM {
			next = startWorker(t, env)
			waitPolling(t, next)
		}
		faultAt = time.Now()
		state := first.stop(t, row.stop, time.Minute)
		if row.stop == syscall.SIGTERM && !state.Success() {
			t.Errorf("the worker stopped with SIGTERM exited %v, want a graceful exit 0:\n%s", state, first.logs())
		}
		// Its stop timeout cut the held call short: the attempt reported
		// its own ending before the process went (activities.HandOff), so
		// the next one did not wait for the heartbeat timeout.
		if row.stop == syscall.SIGTERM && !strings.Contains(first.logs(), "activity handed on") {
			t.Errorf("the worker stopped with SIGTERM logged no hand-off:\n%s", first.logs())
		}
		if next == nil {
			startWorker(t, env) // the same queue and ledger
		}
	case row.want == settleByPerson:
		opID := waitNeedsHuman(t, env, taskID)
		prs := sb.GitHub.PullRequests(faultRepo)
		if len(prs) != 1 {
			t.Fatalf("pull requests = %d, want the 1 whose answer was lost", len(prs))
		}
		url := fmt.Sprintf("%s/%s/pull/%d", strings.TrimRight(sb.GitHubURL, "/"), faultRepo, prs[0].Number)
		if r := runStarter(t, env, "resolve", taskID, opID, "--found", url); r.code != 0 {
			t.Fatalf("resolve --found: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	}
	res := waitResult(t, taskID)
	desc, err := describe(context.Background(), workflows.WorkflowID(taskID))
	if err != nil {
		t.Fatal(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	closed := info.GetCloseTime().AsTime()
	rep.total = closed.Sub(info.GetStartTime().AsTime())
	if faultAt.IsZero() && row.endpoint != "" {
		faultAt = seen.first(row.endpoint)
	}
	if !faultAt.IsZero() {
		rep.fromFault = closed.Sub(faultAt)
		if row.want == settleAny {
			rep.settled = settledAt(t, env, taskID, row).Sub(faultAt)
		}
	}

	n := countEffects(sb)
	rep.effects = fmt.Sprintf("%d/%d/%d/%d/%d", n.Branches, n.FilesWritten, n.PullRequests, n.Comments, n.SlackMessages)
	journal := queryJournal(t, taskID)
	if res.Status != workflows.StatusCompleted {
		rep.outcome = fmt.Sprintf("%s %s", res.Status, res.FailureCode)
		t.Fatalf("task %s ended %s (%s): %s\noperations: %+v\ndeliveries: %+v\njournal:\n%s",
			taskID, res.Status, res.FailureCode, res.Message, res.Operations, res.Deliveries, strings.Join(journal, "\n"))
	}
	if n.Branches != 1 || n.FilesWritten != 1 || n.PullRequests != 1 || n.Comments != 1 || n.SlackMessages != 1 {
		t.Errorf("effects counted: %s; want exactly 1 branch, 1 file write, 1 pull request, 1 comment, 1 Slack message", n)
	}
	for _, op := range res.Operations {
		if op.State != capstan.OutcomeSucceeded {
			t.Errorf("operation %s (%s) = %s, want SUCCEEDED", op.OperationID, op.Tool, op.State)
		}
	}
	if len(res.Operations) != 4 {
		t.Errorf("operations = %+v, want 4 (branch, file, pull request, comment)", res.Operations)
	}
	if len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded {
		t.Errorf("deliveries = %+v, want one succeeded", res.Deliveries)
	}
	for _, st := range append(sb.GitHub.Faults(), sb.Slack.Faults()...) {
		if st.Fired == 0 || (st.Times > 0 && st.Fired != st.Times) {
			t.Errorf("fault %s on %s fired %d times, want %d (0: at least once)", st.Kind, st.Endpoint, st.Fired, st.Times)
		}
	}
	rep.outcome = checkSettlement(t, row, res, journal, sb, seen, listSeen, faultAt)
	if t.Failed() {
		t.Logf("journal of %s:\n%s", taskID, strings.Join(journal, "\n"))
	}
}

// waitPolling waits until w's SDK worker has started polling (its
// "Started Worker" log line), which comes a moment after the worker
// binary says it polls.
func waitPolling(t *testing.T, w *workerProcess) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(w.logs(), "Started Worker") {
		if time.Now().After(deadline) {
			t.Fatalf("the second worker never started polling:\n%s", w.logs())
		}
		select {
		case <-w.exited:
			t.Fatalf("the second worker exited:\n%s", w.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// heldOperation is what names the operation whose answer a stop row holds.
var heldOperation = map[string]string{
	"pulls/create":     ":github_create_pull_request:",
	"chat.postMessage": ":deliver:slack:",
}

// toolOfEndpoint names the tool that writes through a GitHub endpoint.
var toolOfEndpoint = map[string]string{
	"git/create-ref":                       "github_create_branch",
	"repos/create-or-update-file-contents": "github_put_file",
	"pulls/create":                         "github_create_pull_request",
	"issues/create-comment":                "github_comment",
}
