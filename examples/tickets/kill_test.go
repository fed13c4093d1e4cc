package tickets_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"example.com/tickets"
	"github.com/capstanhq/capstan/capstantest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"go.temporal.io/sdk/client"
)

// testWorkerKilledAfterActing runs the task's first worker as a process of
// its own (this test binary, made a worker by TestMain) and SIGKILLs it
// the moment the service has created the ticket, before the answer
// leaves: nothing of the worker survives to say what it did. A second
// worker, in this process, takes the call up once the first one's
// heartbeat is overdue, finds the ticket by the operation id, and the task
// ends with that one ticket.
func testWorkerKilledAfterActing(t *testing.T, c client.Client, address string) {
	f := newFixture(t, c, "OPS", nil)
	f.faults.DelayAnswer(http.MethodPost, "/tickets", time.Minute, 1)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "TEMPORAL_ADDRESS="+address, "TICKETS_URL="+f.url,
		"CAPSTAN_TASK_QUEUE="+f.queue, "CAPSTAN_LEDGER_DSN="+f.ledger)
	for k, v := range f.env {
		child.Env = append(child.Env, k+"="+v)
	}
	var logs bytes.Buffer
	child.Stdout, child.Stderr = &logs, &logs
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
			t.Logf("worker process:\n%s", logs.String())
		}
	})

	task := f.start(capstantest.TaskOptions{})
	select {
	case <-f.created:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the worker process never created the ticket; its output:\n%s", logs.String())
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true

	f.startWorker()
	f.record("worker SIGKILLed after acting", wait(t, task), "no")
}

// runChildWorker is the worker process of testWorkerKilledAfterActing:
// capstan's worker configured by its environment, as cmd/worker is, with
// tickets_create on TICKETS_URL. It runs until it is killed.
func runChildWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	create, err := tickets.NewCreateTool(os.Getenv("TICKETS_URL"), &http.Client{Timeout: 5 * time.Minute})
	if err == nil {
		err = worker.Run(ctx, worker.Options{Tools: []tool.Tool{create}, Stdout: os.Stdout})
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}
