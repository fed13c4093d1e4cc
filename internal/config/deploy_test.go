package config

import (
	"strings"
	"testing"
)

// CAPSTAN_DEPLOYMENT_NAME and CAPSTAN_BUILD_ID go together; a worker with
// one of them, a name with a '.', or a bad tenant weight is refused with
// one sentence.
func TestDeploymentAndTenantWeights(t *testing.T) {
	t.Parallel()
	read := func(env map[string]string) Config {
		env["OPENAI_API_KEY"], env["GITHUB_TOKEN"] = "k", "t"
		return FromEnv(func(k string) string { return env[k] })
	}
	c := read(map[string]string{"CAPSTAN_DEPLOYMENT_NAME": "capstan", "CAPSTAN_BUILD_ID": "v1.2", "CAPSTAN_TENANT_WEIGHTS": "acme=2,beta=0.5", "CAPSTAN_ACTIVITY_SLOTS": "2"})
	if err := c.ValidateWorker(); err != nil {
		t.Fatal(err)
	}
	if !c.Deployment.Versioned() || c.Deployment.BuildID != "v1.2" || c.TenantWeights.String() != "acme=2,beta=0.5" || c.ActivitySlots != 2 {
		t.Errorf("read %+v, weights %s, slots %d", c.Deployment, c.TenantWeights, c.ActivitySlots)
	}
	if c := read(map[string]string{"CAPSTAN_ITEM_CACHE_BYTES": "0"}); c.ItemCacheBytes != 0 || c.ValidateWorker() != nil {
		t.Errorf("CAPSTAN_ITEM_CACHE_BYTES=0: %d, %v; want 0 (no cache)", c.ItemCacheBytes, c.ValidateWorker())
	}
	if c := read(map[string]string{}); c.Deployment.Versioned() || c.ValidateWorker() != nil || c.ItemCacheBytes != DefaultItemCacheBytes {
		t.Errorf("unset: %+v, %v; want an unversioned worker", c.Deployment, c.ValidateWorker())
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CAPSTAN_BUILD_ID": "v1"}, "set together or not at all"},
		{map[string]string{"CAPSTAN_DEPLOYMENT_NAME": "a.b", "CAPSTAN_BUILD_ID": "v1"}, "may not hold '.'"},
		{map[string]string{"CAPSTAN_TENANT_WEIGHTS": "acme"}, "is not TENANT=WEIGHT"},
		{map[string]string{"CAPSTAN_TENANT_WEIGHTS": "acme=0"}, "is not TENANT=WEIGHT"},
		{map[string]string{"CAPSTAN_TENANT_WEIGHTS": "acme=1,acme=2"}, "twice"},
		{map[string]string{"CAPSTAN_ACTIVITY_SLOTS": "0"}, "CAPSTAN_ACTIVITY_SLOTS"},
		{map[string]string{"CAPSTAN_ITEM_CACHE_BYTES": "-1"}, "CAPSTAN_ITEM_CACHE_BYTES=\"-1\" is not a whole number of at least 0"},
		{map[string]string{"CAPSTAN_ITEM_CACHE_BYTES": "16MB"}, "CAPSTAN_ITEM_CACHE_BYTES"},
	} {
		if err := read(tc.env).ValidateWorker(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.env, err, tc.want)
		}
	}
}
