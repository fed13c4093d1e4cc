package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capstanhq/capstan/internal/ledger/postgres/pgtest"
)

// ClusterServices are the Temporal server's four services, in the order a
// cluster starts them: history owns the shards the others wait for.
var ClusterServices = []string{"history", "matching", "frontend", "worker"}

// ClusterBinVar names the directory holding temporal-server and
// temporal-sql-tool (scripts/temporal-cluster.sh's CAPSTAN_CLUSTER_BIN);
// by default .bin/ in the repository, where `scripts/temporal-cluster.sh
// install` (and `make cluster`) put them.
const ClusterBinVar = "CAPSTAN_CLUSTER_BIN"

// Cluster is a real Temporal cluster of a test's own: the pinned server
// (scripts/temporal-cluster.sh's version) as four processes — frontend,
// history, matching, worker — from one config, with PostgreSQL persistence
// and PostgreSQL advanced visibility in two databases of its own, on free
// loopback ports, with the repository's dynamic config
// (ServerSettingsFile). The script writes the databases' schemas, the ports
// and the config (`prepare`); the test process runs the four services as its
// children, so it can SIGKILL one and start it again (KillService,
// StartService) and always reaps what it killed.
type Cluster struct {
	// Addr is the frontend's gRPC address, host:port; Namespace the
	// namespace the cluster serves ("default").
	Addr, Namespace string
	// DSN is the PostgreSQL server the cluster runs on (its databases are
	// DB and DB_visibility there).
	DSN, DB string
	// Dir holds the config, the ports and one log per service.
	Dir string
	// StartedIn is how long StartCluster took, schemas included.
	StartedIn time.Duration

	bin, script string
	ports       map[string]string // NAME_PORT (the script's ports file) → port

	mu     sync.Mutex
	procs  map[string]*clusterProc
	client client.Client
}

type clusterProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// ClusterOptions choose what StartCluster runs on.
type ClusterOptions struct {
	// DSN is the PostgreSQL server (a role that may create databases); by
	// default CAPSTAN_TEST_POSTGRES_DSN (pgtest.AdminDSN: skipped without
	// it, failed under CI=true).
	DSN string
}

// ClusterBin is the directory of the installed server, or ends t: skipped
// without it, failed under CI=true, where .ci/run installs it — CI never
// passes by skipping the cluster's tests.
func ClusterBin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(ClusterBinVar)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), ".bin")
	}
	if fileExists(filepath.Join(dir, "temporal-server")) && fileExists(filepath.Join(dir, "temporal-sql-tool")) {
		return dir
	}
	how := "no temporal-server and temporal-sql-tool in " + dir + ": build the pinned server with `scripts/temporal-cluster.sh install` (about 5 minutes the first time), or set " + ClusterBinVar
	if os.Getenv("CI") == "true" {
		t.Fatal(how + " (CI=true: .ci/run installs it, and the cluster's tests never skip in CI)")
	}
	t.Skip(how)
	return ""
}

// StartCluster starts a cluster for t and stops it when t ends (SIGKILL:
// its databases, named after t and a random suffix, are dropped with
// everything in them, so nothing of it needs keeping). It returns once the
// frontend answers and the namespace "default" is served — a visibility
// query answers there — so a worker started next finds it.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	bin := ClusterBin(t)
	if _, err := TemporalCLI(); err != nil {
		t.Fatal(err)
	}
	dsn := opts.DSN
	if dsn == "" {
		dsn = pgtest.AdminDSN(t)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	c := &Cluster{
		Namespace: "default",
		DSN:       dsn,
		DB:        "temporal_" + dbSafe(t.Name()) + "_" + hex.EncodeToString(b[:]),
		Dir:       t.TempDir(),
		bin:       bin,
		script:    filepath.Join(RepoRoot(), "scripts", "temporal-cluster.sh"),
		procs:     map[string]*clusterProc{},
	}
	t.Cleanup(func() { c.stop(t) })

	dc, err := clusterDynamicConfig(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	cmd := exec.Command(c.script, "prepare")
	cmd.Env = append(os.Environ(),
		"CAPSTAN_TEST_POSTGRES_DSN="+dsn,
		"CAPSTAN_CLUSTER_BIN="+bin,
		"CAPSTAN_CLUSTER_DIR="+c.Dir,
		"CAPSTAN_CLUSTER_DB="+c.DB,
		"CAPSTAN_CLUSTER_LOG_LEVEL=warn",
		"CAPSTAN_CLUSTER_DYNAMIC_CONFIG="+dc,
		// Ports from a random base, so clusters of tests running side by
		// side do not race for the same ones, and below 32768: SQL
		// persistence keeps a service's membership port as a smallint (a
		// service on a higher port dies at start, "unable to initialize
		// membership heartbeats": value out of range for type smallint),
		// and Linux hands out ephemeral ports from 32768 up.
		fmt.Sprintf("CAPSTAN_CLUSTER_PORT=%d", 18000+randN(14000)),
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/temporal-cluster.sh prepare: %v\n%s", err, stderr.String())
	}
	c.Addr = strings.TrimSpace(string(out))
	if c.ports, err = readPorts(filepath.Join(c.Dir, "ports")); err != nil {
		t.Fatal(err)
	}
	for _, s := range ClusterServices {
		c.StartService(t, s)
	}
	c.waitServing(t)
	c.StartedIn = time.Since(began)
	t.Logf("cluster at %s (databases %s and %s_visibility) serving namespace %s %s after the start (schemas included)",
		c.Addr, c.DB, c.DB, c.Namespace, time.Since(began).Round(10*time.Millisecond))
	return c
}

// StartService runs one service (history, matching, frontend or worker)
// and waits until its gRPC port accepts connections. It is how a test
// brings back a service it killed: same config, same ports.
func (c *Cluster) StartService(t testing.TB, service string) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(c.Dir, service+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(c.bin, "temporal-server"), "--config-file", filepath.Join(c.Dir, "config.yaml"),
		"--allow-no-auth", "start", "--service", service)
	cmd.Env = append(os.Environ(), "CAPSTAN_CLUSTER_METRICS_PORT="+c.ports[strings.ToUpper(service)+"_METRICS_PORT"])
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the %s service: %v", service, err)
	}
	p := &clusterProc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	c.mu.Lock()
	c.procs[service] = p
	c.mu.Unlock()

	grpc := c.ports[strings.ToUpper(service)+"_GRPC_PORT"]
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+grpc, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("the %s service exited before it listened on %s:\n%s", service, grpc, c.LogTail(service, 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s service did not listen on %s within 2 minutes:\n%s", service, grpc, c.LogTail(service, 30))
		}
		time.Sleep(100 * time.Millisecond) // nothing to wait on but the port
	}
}

// KillService SIGKILLs one service and waits until it is gone and reaped:
// whatever it had not written to PostgreSQL is lost, as in a crash. It
// returns the process id it killed.
func (c *Cluster) KillService(t testing.TB, service string) int {
	t.Helper()
	c.mu.Lock()
	p := c.procs[service]
	c.mu.Unlock()
	if p == nil {
		t.Fatalf("the %s service is not running", service)
	}
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL the %s service: %v", service, err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s service (pid %d) did not exit within 30 s of SIGKILL", service, pid)
	}
	return pid
}

// Running reports whether the service's process is alive: a service may
// also exit by itself, for example when PostgreSQL is away too long.
func (c *Cluster) Running(service string) bool {
	c.mu.Lock()
	p := c.procs[service]
	c.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Client is a client of the cluster's namespace, dialled once (the SDK
// reconnects by itself across a restart of the frontend).
func (c *Cluster) Client(t testing.TB) client.Client {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := client.DialContext(ctx, client.Options{HostPort: c.Addr, Namespace: c.Namespace})
		if err != nil {
			t.Fatalf("dial the cluster at %s: %v", c.Addr, err)
		}
		c.client = cl
	}
	return c.client
}

// waitServing registers the namespace (retried: the worker service's system
// namespace comes first) and waits until a visibility query answers in it,
// which lags its registration by the frontend's namespace cache.
func (c *Cluster) waitServing(t testing.TB) {
	t.Helper()
	cl := c.Client(t)
	deadline := time.Now().Add(2 * time.Minute)
	registered := false
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if !registered {
			_, err := cl.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
				Namespace: c.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
			})
			var exists *serviceerror.NamespaceAlreadyExists
			registered, last = err == nil || errors.As(err, &exists), err
		}
		if registered {
			_, last = cl.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: c.Namespace})
			if last == nil {
				cancel()
				return
			}
		}
		cancel()
		for _, s := range ClusterServices {
			if !c.Running(s) {
				t.Fatalf("the %s service exited:\n%s", s, c.LogTail(s, 30))
			}
		}
		time.Sleep(250 * time.Millisecond) // nothing to wait on but the answer
	}
	t.Fatalf("the cluster at %s did not serve namespace %s within 2 minutes: %v", c.Addr, c.Namespace, last)
}

// WaitHealthy waits until the namespace answers a visibility query again,
// for example after a service was started anew; it returns how long that
// took.
func (c *Cluster) WaitHealthy(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	cl := c.Client(t)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cl.DescribeTaskQueue(ctx, "capstan-health", enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err == nil {
			_, err = cl.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: c.Namespace})
		}
		cancel()
		if err == nil {
			return time.Since(began)
		}
		if time.Since(began) > within {
			t.Fatalf("the cluster did not answer within %s: %v", within, err)
		}
		time.Sleep(200 * time.Millisecond) // nothing to wait on but the answer
	}
}

// LogTail is the last n lines of a service's log, for a failing test.
func (c *Cluster) LogTail(service string, n int) string {
	f, err := os.Open(filepath.Join(c.Dir, service+".log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// stop SIGKILLs every service, prints their logs' tails when t failed and
// drops the cluster's two databases.
func (c *Cluster) stop(t testing.TB) {
	c.mu.Lock()
	cl := c.client
	c.client = nil
	procs := c.procs
	c.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range procs {
		<-p.exited
	}
	if t.Failed() {
		for _, s := range ClusterServices {
			t.Logf("cluster %s log (last lines):\n%s", s, c.LogTail(s, 40))
		}
	}
	if c.DB == "" || c.DSN == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDatabase(c.DSN))
	if err != nil {
		t.Logf("cluster: could not drop databases %s and %s_visibility: %v", c.DB, c.DB, err)
		return
	}
	defer conn.Close(ctx)
	for _, db := range []string{c.DB, c.DB + "_visibility"} {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("cluster: drop database %s: %v", db, err)
		}
	}
}

// clusterDynamicConfig writes the test cluster's dynamic config into dir
// and returns its path: ServerSettingsFile — what every capstan server
// runs with — and the test-only settings every test's dev server has too
// (drainageFlags: a version's drainage seen within seconds).
func clusterDynamicConfig(dir string) (string, error) {
	base, err := os.ReadFile(filepath.Join(RepoRoot(), ServerSettingsFile))
	if err != nil {
		return "", err
	}
	var extra strings.Builder
	extra.WriteString("\n# Tests only (internal/testenv: drainageFlags).\n")
	for i := 1; i < len(drainageFlags); i += 2 {
		k, v, _ := strings.Cut(drainageFlags[i], "=")
		fmt.Fprintf(&extra, "%s:\n  - value: %s\n", k, v)
	}
	path := filepath.Join(dir, "dynamicconfig.yaml")
	return path, os.WriteFile(path, append(base, extra.String()...), 0o644)
}

// adminDatabase is dsn pointed at the maintenance database "postgres" (a
// database cannot be dropped over a connection to itself).
func adminDatabase(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/postgres"
	return u.String()
}

// readPorts reads the script's ports file (NAME_PORT=port lines).
func readPorts(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the cluster's ports: %w", err)
	}
	ports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: not NAME=port: %q", path, line)
		}
		ports[k] = v
	}
	return ports, nil
}

// dbSafe is name lower-cased with every character outside [a-z0-9] made
// "_", cut to 30 characters: a database name PostgreSQL takes unquoted.
func dbSafe(name string) string {
	b := []byte(strings.ToLower(name))
	for i, ch := range b {
		if (ch < 'a' || ch > 'z') && (ch < '0' || ch > '9') {
			b[i] = '_'
		}
	}
	if len(b) > 30 {
		b = b[:30]
	}
	return string(b)
}

func randN(n int64) int64 {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		return 0
	}
	return v.Int64()
}
