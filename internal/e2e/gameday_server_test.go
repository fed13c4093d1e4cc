package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/testenv"
)

// killableServer is a Temporal dev server of a test's own that can be
// SIGKILLed and started again: on one fixed port, with a persistent SQLite
// database file, so what the server had accepted before the kill is there
// after it (the package's shared server, testenv.StartDevServer, is neither).
type killableServer struct {
	cli, addr, db string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logs   bytes.Buffer // every run's output, for a failing test
	client client.Client
}

// startKillableServer starts the server on a free loopback port with its
// database in the test's temporary directory, and waits until it answers.
// It is stopped (SIGKILL: nothing of it needs to be kept) at the end of the
// test.
func startKillableServer(t *testing.T) *killableServer {
	t.Helper()
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &killableServer{cli: cli, addr: addr, db: t.TempDir() + "/temporal.db"}
	t.Cleanup(func() {
		s.mu.Lock()
		cmd, exited, c := s.cmd, s.exited, s.client
		s.mu.Unlock()
		if c != nil {
			c.Close()
		}
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("temporal dev server output:\n%s", s.output())
		}
	})
	s.start(t)
	return s
}

// start runs the server and waits until a client can talk to it; the
// client is the one Client returns until the next start.
func (s *killableServer) start(t *testing.T) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	cmd := exec.Command(s.cli, "server", "start-dev", "--ip", "127.0.0.1", "--port", port,
		"--namespace", "default", "--headless", "--log-level", "error", "--db-filename", s.db,
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false")
	cmd.Stdout, cmd.Stderr = &syncWriter{mu: &s.mu, w: &s.logs}, &syncWriter{mu: &s.mu, w: &s.logs}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the dev server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var c client.Client
	for {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		c, err = client.DialContext(dctx, client.Options{HostPort: s.addr, Namespace: "default"})
		dcancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the dev server exited before it answered:\n%s", s.output())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			t.Fatalf("the dev server did not answer within 90 s: %v\n%s", err, s.output())
		case <-time.After(200 * time.Millisecond): // nothing to wait on but the dial
		}
	}
	s.mu.Lock()
	old := s.client
	s.cmd, s.exited, s.client = cmd, exited, c
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// kill SIGKILLs the server and waits until it is gone: whatever it had not
// written to its database is lost, as in a crash.
func (s *killableServer) kill(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL the dev server: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the dev server did not exit within 30 s of SIGKILL")
	}
}

// Client is a client of the server's current run.
func (s *killableServer) Client() client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

func (s *killableServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// pid is the server process's id, for the log.
func (s *killableServer) pid() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.Itoa(s.cmd.Process.Pid)
}

// String names the server for the log.
func (s *killableServer) String() string { return fmt.Sprintf("dev server %s (db %s)", s.addr, s.db) }
