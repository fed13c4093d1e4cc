// Package testenv starts the real dependencies capstan's tests run against:
// a Temporal dev server from the pinned CLI (testsuite.DevServerOptions with
// ExistingPath, on a free port) and the project's own binaries. It never
// downloads anything: `make test` installs the CLI into .bin/ first. It also
// holds the few helpers tests of several packages share (GetJSON).
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.yaml.in/yaml/v3"
)

// RepoRoot is the directory holding go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// TemporalCLI is the path of the pinned Temporal CLI: $CAPSTAN_TEMPORAL_BIN,
// else .bin/temporal in the repository.
func TemporalCLI() (string, error) {
	p := os.Getenv("CAPSTAN_TEMPORAL_BIN")
	if p == "" {
		p = filepath.Join(RepoRoot(), ".bin", "temporal")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the Temporal CLI is not at %s: run `make temporal` (or `make test`, which installs it) or set CAPSTAN_TEMPORAL_BIN", p)
	}
	return p, nil
}

// StartDevServer starts a Temporal dev server on a free loopback port, with
// no UI and an in-memory database; extraArgs go to `temporal server
// start-dev` (for example --dynamic-config-value). Stop it with Stop.
func StartDevServer(ctx context.Context, logs io.Writer, extraArgs ...string) (*testsuite.DevServer, error) {
	cli, err := TemporalCLI()
	if err != nil {
		return nil, err
	}
	if logs == nil {
		logs = io.Discard
	}
	return testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  cli,
		ClientOptions: &client.Options{Namespace: "default"},
		LogLevel:      "error",
		Stdout:        logs,
		Stderr:        logs,
		ExtraArgs:     extraArgs,
	})
}

// Binaries are the paths of the project's programs built for a test.
type Binaries struct {
	Worker, Starter string
	// Sandbox serves the offline fakes; an ordinary worker is pointed at
	// it through its base-URL settings, as in `make demo`.
	Sandbox string
	// SandboxMCP is the sandbox's MCP server (stdio, or --http), which a
	// worker starts as a server of its CAPSTAN_MCP_CONFIG.
	SandboxMCP string
}

// BuildBinaries builds ./cmd/worker, ./starter, the sandbox program
// (internal/sandbox/cmd/sandbox) and its MCP server (cmd/sandbox-mcp) into dir and returns their paths. Under
// `go test -race` they are built with -race as well, so the stream
// goroutine, the watchdogs and the parallel reads are race-checked where
// they really run; a race report makes the binary exit 66, which the
// end-to-end tests see as a failure.
func BuildBinaries(dir string) (Binaries, error) {
	bins := Binaries{Worker: filepath.Join(dir, "worker"), Starter: filepath.Join(dir, "starter"), Sandbox: filepath.Join(dir, "sandbox"),
		SandboxMCP: filepath.Join(dir, "sandbox-mcp")}
	args := []string{"build"}
	if RaceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator), "./cmd/worker", "./starter", "./internal/sandbox/cmd/sandbox", "./internal/sandbox/cmd/sandbox-mcp")
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Binaries{}, errors.New("go " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out))
	}
	return bins, nil
}

// ServerSettingsFile holds the Temporal server settings capstan relies on
// (fairness, one partition per queue), in the server's dynamic
// configuration format: docker-compose.yml mounts it into its server, and
// `make demo` (scripts/dev-server-flags.sh) and the tests' dev servers
// (DevServerFlags) take each setting as a flag.
const ServerSettingsFile = "deploy/temporal/dynamicconfig.yaml"

// ServerSettings reads ServerSettingsFile as dev-server flags,
// --dynamic-config-value=KEY=VALUE with VALUE as JSON, sorted by key. The
// dev server takes one value per key and no constraints, so an entry with
// several values or with constraints is an error rather than a setting
// silently dropped.
func ServerSettings() ([]string, error) {
	path := filepath.Join(RepoRoot(), ServerSettingsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string][]struct {
		Value       any            `yaml:"value"`
		Constraints map[string]any `yaml:"constraints"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	flags := make([]string, 0, len(keys))
	for _, k := range keys {
		vs := doc[k]
		if len(vs) != 1 || len(vs[0].Constraints) != 0 || vs[0].Value == nil {
			return nil, fmt.Errorf("%s: %s must have exactly one value and no constraints, as the dev server's flags take it", path, k)
		}
		v, err := json.Marshal(vs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		flags = append(flags, "--dynamic-config-value="+k+"="+string(v))
	}
	return flags, nil
}

// drainageFlags make a deployment version's drainage status refresh within
// seconds rather than minutes, so a test sees an old build drain. Tests
// only: a real server keeps its defaults.
var drainageFlags = []string{
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusRefreshInterval="2s"`,
	"--dynamic-config-value", `matching.wv.VersionDrainageStatusVisibilityGracePeriod="2s"`,
}

// DevServerFlags are the flags every test's dev server starts with: the
// ServerSettings every capstan server has (TestLongFairness measures what
// they buy) and drainageFlags.
func DevServerFlags() ([]string, error) {
	s, err := ServerSettings()
	if err != nil {
		return nil, err
	}
	return append(s, drainageFlags...), nil
}

// BuildWorker builds ./cmd/worker with the build tags into dir/name (-race as
// BuildBinaries does) and returns its path: a second build of the worker
// whose code differs, for a rolling deploy.
func BuildWorker(dir, name string, tags ...string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build"}
	if RaceEnabled {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-o", out, "./cmd/worker")
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(b))
	}
	return out, nil
}
