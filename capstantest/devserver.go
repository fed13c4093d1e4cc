package capstantest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan/internal/workflows"
)

// TemporalBinEnv names the environment variable [StartDevServer] reads the
// Temporal CLI's path from when it is given none.
const TemporalBinEnv = "CAPSTAN_TEMPORAL_BIN"

// DevServer is a Temporal dev server a test started: in memory, on a free
// loopback port, without its UI. It stops when the test ends.
type DevServer struct {
	srv       *testsuite.DevServer
	namespace string
}

// StartDevServer starts `temporal server start-dev` from the Temporal CLI
// at bin ("" means $CAPSTAN_TEMPORAL_BIN), on a free loopback port, and
// stops it with t.Cleanup. Without a CLI it fails the test saying how to
// install one. It registers the search attributes every capstan task
// carries, as a worker does at its start, so a task can be started before
// any worker has run.
func StartDevServer(t testing.TB, bin string) *DevServer {
	t.Helper()
	if bin == "" {
		bin = os.Getenv(TemporalBinEnv)
	}
	if bin == "" {
		t.Fatalf("capstantest: no Temporal CLI: set %s to the path of the `temporal` binary "+
			"(install it with `curl -sSf https://temporal.download/cli.sh | sh`, or `make temporal` in capstan's repository, which puts it in .bin/temporal)", TemporalBinEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("capstantest: the Temporal CLI is not at %s (%v): set %s to the path of the `temporal` binary", bin, err, TemporalBinEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "default"
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
		ClientOptions: &client.Options{Namespace: ns},
		LogLevel:      "error",
		ExtraArgs:     devServerFlags(),
	})
	if err != nil {
		t.Fatalf("capstantest: start the Temporal dev server from %s: %v", bin, err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	d := &DevServer{srv: srv, namespace: ns}
	if err := registerAttributes(ctx, srv.Client(), ns); err != nil {
		t.Fatalf("capstantest: %v", err)
	}
	return d
}

// devServerFlags are the server settings capstan relies on (fairness, one
// partition per queue), as deploy/temporal/dynamicconfig.yaml holds them
// (TestDevServerFlags checks they agree): written out here, since a user's
// module has no copy of capstan's repository to read them from.
func devServerFlags() []string {
	return []string{
		"--dynamic-config-value=matching.enableFairness=true",
		"--dynamic-config-value=matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value=matching.numTaskqueueWritePartitions=1",
	}
}

// registerAttributes defines capstan's search attributes the namespace
// lacks.
func registerAttributes(ctx context.Context, c client.Client, ns string) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return err
	}
	missing := map[string]enums.IndexedValueType{}
	for _, key := range workflows.MissingSearchAttributes(list.GetCustomAttributes()) {
		missing[key.GetName()] = key.GetValueType()
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: missing})
	return err
}

// Address is the server's frontend, host:port, what TEMPORAL_ADDRESS names.
func (d *DevServer) Address() string { return d.srv.FrontendHostPort() }

// Namespace is the namespace the server serves tasks in: "default".
func (d *DevServer) Namespace() string { return d.namespace }

// Client dials a new client of the server's namespace, closed with
// t.Cleanup. Its log lines (and those of a worker using it) at warning
// level and above go to standard error; the SDK's debug and info lines,
// one per workflow command, are dropped.
func (d *DevServer) Client(t testing.TB) client.Client {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.Dial(client.Options{HostPort: d.Address(), Namespace: d.namespace, Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		t.Fatalf("capstantest: dial the dev server at %s: %v", d.Address(), err)
	}
	t.Cleanup(c.Close)
	return c
}
