package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeRunsTheClusterServerVersion: docker-compose.yml's Temporal
// server, and the admin-tools image of its schema and namespace jobs, are
// of the version scripts/temporal-cluster.sh builds for `make cluster` and
// the tests' clusters (SERVER_VERSION): what compose runs is what was
// tested.
func TestComposeRunsTheClusterServerVersion(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	script, err := os.ReadFile(filepath.Join(root, "scripts", "temporal-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SERVER_VERSION=v(\S+)`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/temporal-cluster.sh sets no SERVER_VERSION=v…")
	}
	version := string(m[1])
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image string `yaml:"image"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	for svc, want := range map[string]string{
		"temporal":         "temporalio/server:" + version,
		"temporal-schema":  "temporalio/admin-tools:" + version,
		"create-namespace": "temporalio/admin-tools:" + version,
	} {
		if got := c.Services[svc].Image; got != want {
			t.Errorf("docker-compose.yml service %s runs image %q, want %q (scripts/temporal-cluster.sh's SERVER_VERSION)", svc, got, want)
		}
	}
}
