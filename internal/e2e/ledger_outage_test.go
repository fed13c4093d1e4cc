package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// ledgerOutage is how long the ledger's PostgreSQL stays stopped in the
// middle of the task (issue 14 item 2).
const ledgerOutage = 30 * time.Second

// TestLedgerOutageMidTask stops the ledger's PostgreSQL — a private server
// of the test's own — in the middle of a task, keeps it stopped for 30 s
// and starts it again. The task must complete with every effect exactly
// once — one branch, one file, one pull request, one Slack message — and
// no operation may wait for a person. The outage begins at an event of the
// task, never at a guessed time:
//
//   - tool_call: as the first tool call reaches GitHub, so the branch is
//     created while nothing can record it;
//   - model_turn: as the second model turn's request reaches the model, so
//     its answer cannot be committed, and the turns after it cannot read
//     the ledger: the task waits for breaker ledger, journalled.
//
// The two run side by side, each with a PostgreSQL of its own, so their
// outages overlap rather than add up.
func TestLedgerOutageMidTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// at installs the hook that calls stop at the outage's event.
		at func(sb *sandbox.Sandbox, stop func())
		// waits: the journal must show the task waiting for the ledger's
		// breaker (a tool call's outcome is recorded by the activity
		// itself, waiting within it).
		waits bool
	}{
		{name: "tool_call", at: func(sb *sandbox.Sandbox, stop func()) {
			sb.GitHub.SetFault(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git/refs") {
					stop()
				}
				return false // the branch is created, with the ledger down
			})
		}},
		{name: "model_turn", waits: true, at: func(sb *sandbox.Sandbox, stop func()) {
			var mu sync.Mutex
			n := 0
			sb.Model.SetFault(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				mu.Lock()
				n++
				second := n == 2
				mu.Unlock()
				if second {
					stop()
				}
				return false // the model answers, with the ledger down
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pg := startPrivatePostgres(t)
			sb := startSandbox(t)
			env := append(endpointEnv(t, "e2e-ledger-outage-"+tc.name, sb), "CAPSTAN_LEDGER_DSN="+pg.dsn)
			outage := pg.outageAt()
			tc.at(sb, outage.begin)
			startWorker(t, env)
			taskID := fmt.Sprintf("e2e-ledger-outage-%s-%d", tc.name, time.Now().UnixNano())
			start := time.Now()
			if r := runStarter(t, env, "run",
				"--prompt", "Add a HELLO.md greeting, open a pull request and tell the team.",
				"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", "#capstan-e2e",
				"--model", "openai:demo", "--id", taskID); r.code != 0 {
				t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
			}
			down, up := outage.wait(t)
			t.Logf("PostgreSQL stopped %s after the start; started again %s later",
				down.Sub(start).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond))
			res := waitOutcome(t, env, taskID, 5*time.Minute)
			t.Logf("task ended %s %s %.1f s after the ledger came back (%.1f s in all)", res.Status, res.FailureCode,
				time.Since(up).Seconds(), time.Since(start).Seconds())
			checkOutage(t, sb, taskID, res, tc.waits)
		})
	}
}

// checkOutage checks what a task that lived through an outage of its
// ledger did: completed, every effect exactly once, nobody asked.
func checkOutage(t *testing.T, sb *sandbox.Sandbox, taskID string, res workflows.TaskResult, waits bool) {
	t.Helper()
	journal := queryJournal(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s\njournal:\n%s", taskID, res.Status, res.FailureCode, res.Message, strings.Join(journal, "\n"))
	}
	for _, op := range res.Operations {
		if op.State != capstan.OutcomeSucceeded {
			t.Errorf("operation %s (%s) = %s (%s), want succeeded", op.OperationID, op.Tool, op.State, op.Reason)
		}
	}
	if gh := sb.GitHub.Stats(); gh.BranchesCreated != 1 || gh.FilesWritten != 1 || gh.PullRequestsCreated != 1 || gh.CommentsCreated != 0 {
		t.Errorf("github stats = %+v, want exactly 1 branch, 1 file write, 1 pull request, 0 comments", gh)
	}
	if n := sb.Slack.Stats().MessagesPosted; n != 1 {
		t.Errorf("slack messages = %d, want exactly 1", n)
	}
	waited := false
	for _, line := range journal {
		waited = waited || strings.Contains(line, "for breaker ledger")
		if strings.Contains(line, "needs a person") {
			t.Errorf("journal asks a person: %s", line)
		}
	}
	if waits && !waited {
		t.Errorf("the journal never says the task waited for breaker ledger:\n%s", strings.Join(journal, "\n"))
	}
}

// pgOutage is one stop of a private PostgreSQL, begun at an event of the
// test's choosing and ended ledgerOutage later.
type pgOutage struct {
	pg      *privatePostgres
	once    sync.Once
	stopped chan time.Time
	done    chan error
}

func (p *privatePostgres) outageAt() *pgOutage {
	return &pgOutage{pg: p, stopped: make(chan time.Time, 1), done: make(chan error, 1)}
}

// begin stops the server, the first time it is called, and starts it
// again ledgerOutage later. It returns once the server is stopped.
func (o *pgOutage) begin() {
	o.once.Do(func() {
		if err := o.pg.script("stop"); err != nil {
			o.done <- fmt.Errorf("stop PostgreSQL: %w", err)
			return
		}
		o.stopped <- time.Now()
		time.AfterFunc(ledgerOutage, func() { o.done <- o.pg.script("start") })
	})
}

// wait returns when the outage began and when the server was back.
func (o *pgOutage) wait(t *testing.T) (down, up time.Time) {
	t.Helper()
	select {
	case down = <-o.stopped:
	case err := <-o.done:
		t.Fatal(err)
	case <-time.After(3 * time.Minute):
		t.Fatal("the task never reached the event the outage begins at")
	}
	if err := <-o.done; err != nil {
		t.Fatalf("start PostgreSQL again: %v", err)
	}
	return down, time.Now()
}

// waitOutcome waits until the task is completed, failed or cancelled — or
// waits for a person, which is an outcome too: nobody will come — and
// returns its status.
func waitOutcome(t *testing.T, env []string, taskID string, within time.Duration) workflows.TaskResult {
	t.Helper()
	deadline := time.Now().Add(within)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	done := make(chan workflows.TaskResult, 1)
	go func() {
		var res workflows.TaskResult
		if err := temporal.GetWorkflow(ctx, workflows.WorkflowID(taskID), "").Get(ctx, &res); err != nil {
			res.Status, res.Message = workflows.StatusFailed, err.Error()
		}
		done <- res
	}()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		select {
		case res := <-done:
			return res
		case <-poll.C:
			// A task waiting for a person never ends by itself: its status
			// is the only event there is to see, so poll it.
			st := runStarter(t, env, "status", taskID, "--json")
			if st.code == 0 {
				if res := decodeResult(t, st); res.Status == workflows.StatusNeedsHuman {
					return res
				}
			}
		case <-ctx.Done():
			t.Fatalf("task %s did not end within %s", taskID, within)
		}
	}
}

// privatePostgres is a PostgreSQL server of the test's own, which it may
// stop and start (scripts/postgres.sh): never the shared one.
type privatePostgres struct {
	dir, port, dsn string
}

// startPrivatePostgres starts a private server on a free port. Without
// PostgreSQL's binaries it skips the test — unless CI=true, where it fails.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	if !havePostgres() && os.Getenv("CI") != "true" {
		t.Skip("PostgreSQL's binaries are not installed (scripts/postgres.sh needs initdb)")
	}
	// Under /tmp, not t.TempDir(): as root, the server runs as the
	// postgres user, who must reach the directory.
	dir, err := os.MkdirTemp("", "capstan-outage-pg")
	if err != nil {
		t.Fatal(err)
	}
	pg := &privatePostgres{dir: dir, port: strconv.Itoa(freePort(t))}
	t.Cleanup(func() {
		_ = pg.script("stop")
		_ = os.RemoveAll(dir)
	})
	if err := pg.script("start"); err != nil {
		t.Fatalf("start a private PostgreSQL: %v", err)
	}
	port, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		t.Fatal(err)
	}
	pg.port = strings.TrimSpace(string(port)) // the script may have moved on from a taken port
	pg.dsn = "postgres://capstan:capstan-test-password@127.0.0.1:" + pg.port + "/capstan"
	return pg
}

// script runs scripts/postgres.sh verb on the private server.
func (p *privatePostgres) script(verb string) error {
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "postgres.sh"), verb)
	cmd.Env = append(os.Environ(), "CAPSTAN_PG_DIR="+p.dir, "CAPSTAN_PG_PORT="+p.port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/postgres.sh %s: %w\n%s", verb, err, out)
	}
	return nil
}

// havePostgres reports whether scripts/postgres.sh can find initdb.
func havePostgres() bool {
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		return true
	}
	_, err := exec.LookPath("initdb")
	return err == nil
}

// freePort is a TCP port nothing listens on at the moment, other than the
// shared test servers' (56432, 57432).
func freePort(t *testing.T) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 56432 && port != 57432 {
			return port
		}
	}
}
