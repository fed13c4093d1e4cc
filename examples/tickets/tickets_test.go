package tickets_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/tickets"
	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/capstantest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"go.temporal.io/sdk/client"
)

// These tests run tickets_create the way a team outside capstan would: a
// real Temporal dev server (the CLI at $CAPSTAN_TEMPORAL_BIN), capstan's
// sandbox for the model, the ticket service on loopback behind
// capstantest.Faults, and a capstan worker from package worker with the
// tool in its Options. They count tickets on the service and the requests
// it received, never the tool's own view of itself.

// fixture is one test's ticket service, sandbox and worker.
type fixture struct {
	t       *testing.T
	c       client.Client
	sb      *capstantest.Sandbox
	svc     *tickets.Service
	faults  *capstantest.Faults
	created chan tickets.Ticket
	url     string
	queue   string
	ledger  string
	env     map[string]string
	w       *worker.Worker
}

// script is what the scripted model does in every test: file one ticket,
// then say so.
const script = "file-ticket"

// newFixture starts the service and the sandbox and scripts the model to
// call tickets_create for project; the worker is started by startWorker.
func newFixture(t *testing.T, c client.Client, project string, env map[string]string) *fixture {
	t.Helper()
	return newFixtureOfTurns(t, c, project, env, 1)
}

// newFixtureOfTurns is newFixture with a model that calls tickets_create
// in each of turns turns before it answers.
func newFixtureOfTurns(t *testing.T, c client.Client, project string, env map[string]string, turns int) *fixture {
	t.Helper()
	f := &fixture{t: t, c: c, sb: capstantest.StartSandbox(t), created: make(chan tickets.Ticket, 16),
		queue:  "tickets-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()),
		ledger: "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")}
	f.svc = &tickets.Service{Created: f.created}
	f.faults = capstantest.NewFaults(f.svc)
	srv := httptest.NewServer(f.faults)
	t.Cleanup(srv.Close)
	t.Cleanup(f.faults.Close)
	f.url = srv.URL
	var steps []capstantest.Step
	for i := range turns {
		title := "disk full on db-3 ({{task_id}})"
		if i > 0 {
			title = fmt.Sprintf("disk full on db-%d ({{task_id}})", 3+i)
		}
		steps = append(steps, capstantest.Step{Calls: []capstantest.Call{{Tool: "tickets_create",
			Arguments: map[string]any{"project": project, "title": title}}}})
	}
	f.sb.Script(script, append(steps, capstantest.Step{Text: "Filed the ticket."})...)
	f.env = f.sb.Env()
	f.env["CAPSTAN_METRICS_ADDR"] = "127.0.0.1:0"
	f.env["CAPSTAN_STREAM_ADDR"] = ""
	f.env["CAPSTAN_HEARTBEAT_TIMEOUT"] = "5s"
	for k, v := range env {
		f.env[k] = v
	}
	return f
}

// newTool is tickets_create on the fixture's service, with a client that
// gives up on an answer after two seconds.
func (f *fixture) newTool() tool.Tool {
	f.t.Helper()
	create, err := tickets.NewCreateTool(f.url, &http.Client{Timeout: 2 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	return create
}

// startWorker starts a capstan worker offering tickets_create, in this
// process.
func (f *fixture) startWorker() *worker.Worker {
	f.t.Helper()
	w, err := worker.New(context.Background(), worker.Options{Client: f.c, TaskQueue: f.queue, LedgerDSN: f.ledger,
		Tools: []tool.Tool{f.newTool()}, LookupEnv: lookup(f.env)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		w.Close()
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { w.Stop(); w.Close() })
	f.w = w
	return w
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// start starts the task of the script on the fixture's queue.
func (f *fixture) start(o capstantest.TaskOptions) *capstantest.Task {
	f.t.Helper()
	o.Prompt = "The disk of db-3 is full: file a ticket."
	o.Model = "openai:" + script
	o.TaskQueue = f.queue
	return capstantest.StartTask(f.t, f.c, o)
}

// wait waits for task to end, at most three minutes.
func wait(t *testing.T, task *capstantest.Task) capstantest.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := task.Wait(ctx)
	if err != nil {
		t.Fatalf("task %s: %v", task.ID(), err)
	}
	return res
}

// row is one line of the fault table, as the closing note gives it.
type row struct {
	fault, outcome        string
	tickets, posts, looks int
	asked                 string
}

// table collects the rows of the subtests that ran, for the log.
var table struct {
	sync.Mutex
	rows []row
}

// record checks that the task completed with one tickets_create operation
// that succeeded, that the service holds exactly one ticket and that it
// carries the operation's id, and adds the row to the table.
func (f *fixture) record(fault string, res capstantest.TaskResult, asked string) {
	f.t.Helper()
	if res.Status != capstantest.StatusCompleted {
		f.t.Fatalf("task ended %s (%s): %s", res.Status, res.FailureCode, res.Message)
	}
	if len(res.Operations) != 1 || res.Operations[0].Tool != "tickets_create" || res.Operations[0].Outcome != capstan.OutcomeSucceeded {
		f.t.Fatalf("operations %+v; want one tickets_create that succeeded", res.Operations)
	}
	op := res.Operations[0]
	all := f.svc.Tickets()
	if len(all) != 1 {
		f.t.Fatalf("the service holds %d tickets (%+v); want exactly 1", len(all), all)
	}
	if all[0].RequestID != op.ID {
		f.t.Errorf("the ticket carries request id %q; want the operation's, %s", all[0].RequestID, op.ID)
	}
	if want := fmt.Sprintf("%s/tickets/%d", f.url, all[0].ID); op.ExternalID != want {
		f.t.Errorf("the operation's external id is %q; want %s", op.ExternalID, want)
	}
	outcome := string(op.Outcome)
	if op.Recovered {
		outcome += " (recovered)"
	}
	table.Lock()
	defer table.Unlock()
	table.rows = append(table.rows, row{fault: fault, outcome: outcome, tickets: len(all),
		posts: f.faults.Requests(http.MethodPost, "/tickets"), looks: f.faults.Requests(http.MethodGet, "/tickets"), asked: asked})
}

// TestTicketsCreateKeepsCapstansGuarantees runs the fault table: whatever
// the service or the worker does, the task ends with one ticket, and a
// person is asked only when nobody else can tell.
func TestTicketsCreateKeepsCapstansGuarantees(t *testing.T) {
	dev := capstantest.StartDevServer(t, "")
	c := dev.Client(t)
	t.Run("group", func(t *testing.T) {
		t.Run("no fault", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.startWorker()
			f.record("none", wait(t, f.start(capstantest.TaskOptions{})), "no")
		})
		t.Run("answer lost after acting", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.faults.DropAfterActing(http.MethodPost, "/tickets", 1)
			f.startWorker()
			f.record("answer lost after acting", wait(t, f.start(capstantest.TaskOptions{})), "no")
		})
		t.Run("answer too late", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.faults.DelayAnswer(http.MethodPost, "/tickets", 10*time.Second, 1)
			f.startWorker()
			f.record("answer later than the client waits", wait(t, f.start(capstantest.TaskOptions{})), "no")
		})
		t.Run("502 before acting", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.faults.FailBeforeActing(http.MethodPost, "/tickets", http.StatusBadGateway, 1)
			f.startWorker()
			f.record("502 before acting", wait(t, f.start(capstantest.TaskOptions{ReconcileWindow: 3 * time.Second})), "no")
		})
		t.Run("nobody can tell", func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, c, "OPS", nil)
			f.faults.DropAfterActing(http.MethodPost, "/tickets", 1)
			f.faults.FailBeforeActing(http.MethodGet, "/tickets", http.StatusServiceUnavailable, 0)
			f.startWorker()
			task := f.start(capstantest.TaskOptions{ReconcileWindow: 3 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			op, err := task.WaitForOutcome(ctx, capstan.OutcomeNeedsHuman)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(f.svc.Tickets()); n != 1 {
				t.Fatalf("%d tickets while a person is asked; want the 1 the lost answer made", n)
			}
			// The person looks in the tracker and names the ticket; the
			// tool reads it back before the answer is taken.
			if err := task.ResolveFound(ctx, op.ID, fmt.Sprintf("%s/tickets/%d", f.url, f.svc.Tickets()[0].ID+1)); err == nil {
				t.Errorf("ResolveFound took a ticket that does not exist")
			}
			if err := task.ResolveFound(ctx, op.ID, fmt.Sprintf("%s/tickets/%d", f.url, f.svc.Tickets()[0].ID)); err != nil {
				t.Fatal(err)
			}
			f.record("answer lost, look-ups refused (503)", wait(t, task), "yes: resolve --found, read back")
		})
		t.Run("worker killed after acting", func(t *testing.T) {
			t.Parallel()
			testWorkerKilledAfterActing(t, c, dev.Address())
		})
	})
}

// childEnv names the variable that makes this test binary a worker process
// (TestMain), for the test that kills one.
const childEnv = "TICKETS_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChildWorker())
	}
	code := m.Run()
	if testing.Verbose() && len(table.rows) > 0 {
		fmt.Printf("%-50s %-22s %7s %5s %7s  %s\n", "fault", "outcome", "tickets", "POSTs", "lookups", "person asked")
		for _, r := range table.rows {
			fmt.Printf("%-50s %-22s %7d %5d %7d  %s\n", r.fault, r.outcome, r.tickets, r.posts, r.looks, r.asked)
		}
	}
	os.Exit(code)
}
