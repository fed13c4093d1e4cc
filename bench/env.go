package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// env is what every measurement shares: one Temporal dev server, one
// sandbox (model, GitHub, Slack fakes on loopback) and a scratch directory
// for ledgers and logs.
type env struct {
	dir    string
	server *testsuite.DevServer
	// serverMetrics is the dev server's Prometheus endpoint (serverops.go).
	serverMetrics string
	client        client.Client // the driver's: starts tasks and reads histories
	sandbox       *sandbox.Sandbox
	logger        *slog.Logger // workers' logs, to a file in dir
	logFile       *os.File
	seq           atomic.Int64 // numbers task queues and task ids, so runs never share one
}

// startEnv starts the dev server from the pinned CLI and the sandbox. The
// server reads search attributes as a production server does
// (productionSearchAttributes); capstan's are defined when it starts, and
// the first capstan worker finds them there, as it does on a server where
// an operator registered them (internal/workerapp).
func startEnv(ctx context.Context, dir string) (_ *env, err error) {
	e := &env{dir: dir}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.logFile, err = os.Create(filepath.Join(dir, "workers.log"))
	if err != nil {
		return nil, err
	}
	// The workers log as a real worker does (JSON, info), to a file: the
	// cost of logging is part of what is measured, the terminal stays
	// readable.
	e.logger = slog.New(slog.NewJSONHandler(e.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	serverLog, err := os.Create(filepath.Join(dir, "temporal.log"))
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	e.serverMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	args := append([]string{"--metrics-port", strconv.Itoa(port)}, productionSearchAttributes()...)
	e.server, err = testenv.StartDevServer(ctx, serverLog, args...)
	if err != nil {
		return nil, fmt.Errorf("start the Temporal dev server: %w", err)
	}
	e.client = e.server.Client()
	e.sandbox, err = sandbox.Start(sandbox.Options{})
	if err != nil {
		return nil, fmt.Errorf("start the sandbox: %w", err)
	}
	return e, nil
}

func (e *env) close() {
	if e.sandbox != nil {
		_ = e.sandbox.Close()
	}
	if e.server != nil {
		_ = e.server.Stop()
	}
	if e.logFile != nil {
		_ = e.logFile.Close()
	}
}

// productionSearchAttributes are the dev server's flags that make it read
// search attributes as a production server does, with capstan's already
// defined.
//
// The CLI starts its dev server with system.forceSearchAttributesCacheRefreshOnRead
// on, so that an attribute registered a moment ago is seen at once: every
// read of a workflow's search attributes — validating a start or an
// upsert, writing a visibility record — goes to the database for the
// cluster's metadata and the namespace (the latter under a lock all such
// reads share). Temporal's own description of the setting says it is for
// testing and not for production, where the server caches both. Left on,
// it charges a task for each search attribute it carries: 18.6 reads of
// the cluster's metadata and 3.9 of the namespace per capstan task
// against bare's 12.9 and 1.0 (2026-12-03 19:13, "What the tasks asked of
// the server"). With it off, an attribute registered while the server
// runs may be unknown to it for up to a minute, so capstan's are defined
// at its start instead (--search-attribute), as an operator would before
// starting workers.
func productionSearchAttributes() []string {
	args := []string{"--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false"}
	for _, key := range workflows.SearchAttributes {
		args = append(args, "--search-attribute", key.GetName()+"="+key.GetValueType().String())
	}
	return args
}

// freePort is a loopback port free at the moment of asking.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// next returns a fresh name with prefix: task queues and task ids are never
// reused, so a late task of one run can never be counted in another.
func (e *env) next(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, e.seq.Add(1))
}

// serverCPU returns the CPU time the dev server process (a child of this
// one) has used so far, or 0 when it cannot be read. A run's share of it
// shows how much of a task's cost lands on Temporal rather than the worker.
func serverCPU() time.Duration {
	pid := devServerPID()
	if pid == 0 {
		return 0
	}
	return processCPU(pid)
}

// devServerPID finds the child process that runs `temporal server
// start-dev`.
func devServerPID() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fields := procStat(pid)
		if len(fields) < 2 || fields[1] != strconv.Itoa(self) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "start-dev") {
			return pid
		}
	}
	return 0
}

// procStat returns the fields of /proc/pid/stat after the command name:
// state, ppid, … (so utime is index 11 and stime 12).
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// clockTicks is USER_HZ, the unit of utime and stime; 100 on every Linux
// this runs on.
const clockTicks = 100

// processCPU is the process's own CPU time, user and system.
func processCPU(pid int) time.Duration {
	return statCPU(procStat(pid), 11, 12) // utime, stime
}

// statCPU sums the procStat fields at the given indexes, in clock ticks,
// as a duration; 0 when the fields are missing.
func statCPU(f []string, fields ...int) time.Duration {
	var ticks int64
	for _, i := range fields {
		if i >= len(f) {
			return 0
		}
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// postgresCPU is the CPU time of the PostgreSQL servers running on this
// machine, their exited backends included (a postmaster's reaped children):
// the work a PostgreSQL ledger puts on its server, which shares these CPUs
// with the dev server and the workers. 0 when none runs or /proc is
// unreadable; a server idle during a round adds next to nothing.
func postgresCPU() time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		total += statCPU(procStat(pid), 11, 12, 13, 14) // utime, stime, cutime, cstime
	}
	return total
}

// selfCPU is the CPU time this process (workers, sandbox, driver) has used.
func selfCPU() time.Duration { return processCPU(os.Getpid()) }
