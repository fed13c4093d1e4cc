package testenv

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestClusterDynamicConfig: a test cluster's dynamic config is every
// setting of ServerSettingsFile plus the test-only drainage settings the
// tests' dev servers have, in the server's format (one value each).
func TestClusterDynamicConfig(t *testing.T) {
	path, err := clusterDynamicConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]struct {
		Value any `yaml:"value"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	want := map[string]any{
		"matching.enableFairness":                                true,
		"matching.numTaskqueueReadPartitions":                    1,
		"matching.numTaskqueueWritePartitions":                   1,
		"matching.wv.VersionDrainageStatusRefreshInterval":       "2s",
		"matching.wv.VersionDrainageStatusVisibilityGracePeriod": "2s",
	}
	for k, v := range want {
		if got := doc[k]; len(got) != 1 || got[0].Value != v {
			t.Errorf("%s = %+v, want one value %v", k, got, v)
		}
	}
}
