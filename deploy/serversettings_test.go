package deploy_test

import (
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestEveryServerReadsTheSameSettings: deploy/temporal/dynamicconfig.yaml
// is the one place the Temporal server settings capstan relies on live.
// The tests' dev servers read it through testenv.ServerSettings, `make
// demo`'s through scripts/dev-server-flags.sh, and docker-compose.yml's
// server mounts it; each reader must see every setting, and fairness must
// be one of them (without it `starter run --tenant` orders nothing).
func TestEveryServerReadsTheSameSettings(t *testing.T) {
	t.Parallel()
	fromGo, err := testenv.ServerSettings()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(fromGo, "--dynamic-config-value=matching.enableFairness=true") {
		t.Errorf("%s does not turn fairness on: %q", testenv.ServerSettingsFile, fromGo)
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "dev-server-flags.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/dev-server-flags.sh: %v", err)
	}
	fromScript := strings.Fields(string(out))
	slices.Sort(fromScript)
	if !slices.Equal(fromScript, fromGo) {
		t.Errorf("make demo's dev server and the tests' read %s differently:\nscripts/dev-server-flags.sh: %q\ntestenv.ServerSettings:      %q",
			testenv.ServerSettingsFile, fromScript, fromGo)
	}
}

// TestComposeServerMountsTheSettings: docker-compose.yml's Temporal server
// mounts deploy/temporal/dynamicconfig.yaml where DYNAMIC_CONFIG_FILE_PATH
// (relative to the image's /etc/temporal) points.
func TestComposeServerMountsTheSettings(t *testing.T) {
	t.Parallel()
	svc, ok := readCompose(t).Services["temporal"]
	if !ok {
		t.Fatal("docker-compose.yml has no temporal service")
	}
	rel := svc.Environment["DYNAMIC_CONFIG_FILE_PATH"]
	if rel == "" {
		t.Fatal("the temporal service sets no DYNAMIC_CONFIG_FILE_PATH: it runs with the image's settings, fairness off")
	}
	target := path.Join("/etc/temporal", rel)
	for _, v := range svc.Volumes {
		src, rest, _ := strings.Cut(v, ":")
		dst, _, _ := strings.Cut(rest, ":")
		if dst == target {
			if filepath.Clean(src) != filepath.Clean("./"+testenv.ServerSettingsFile) {
				t.Errorf("the temporal service mounts %s at %s, want %s", src, dst, testenv.ServerSettingsFile)
			}
			return
		}
	}
	t.Errorf("the temporal service mounts nothing at %s (DYNAMIC_CONFIG_FILE_PATH=%s); volumes: %q", target, rel, svc.Volumes)
}
