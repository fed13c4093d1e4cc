package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Deployment is the Worker Deployment Version a worker runs as
// (CAPSTAN_DEPLOYMENT_NAME, CAPSTAN_BUILD_ID): both set, the worker polls
// under Temporal's Worker Versioning and the tasks it starts are pinned to
// its build; both empty, it runs unversioned. One without the other is a
// problem ValidateWorker reports.
type Deployment struct {
	Name    string
	BuildID string
}

// Versioned reports whether the worker runs under Worker Versioning.
func (d Deployment) Versioned() bool { return d.Name != "" && d.BuildID != "" }

// TenantWeights (CAPSTAN_TENANT_WEIGHTS) are the fairness weights of named
// tenants: a tenant of weight 2 is dispatched about twice the tasks of one
// of weight 1 when both wait. A tenant not listed has weight 1 (Temporal's
// default).
type TenantWeights map[string]float32

// Weight is tenant's weight: its listed value, or 0 (Temporal's default of
// 1) when it is not listed.
func (w TenantWeights) Weight(tenant string) float32 { return w[tenant] }

// String is the weights as CAPSTAN_TENANT_WEIGHTS spells them, sorted.
func (w TenantWeights) String() string {
	names := make([]string, 0, len(w))
	for n := range w {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + strconv.FormatFloat(float64(w[n]), 'g', -1, 32)
	}
	return strings.Join(parts, ",")
}

// Temporal clamps fairness weights to this range.
const (
	minTenantWeight = 0.001
	maxTenantWeight = 1000
)

// readDeployment reads CAPSTAN_DEPLOYMENT_NAME, CAPSTAN_BUILD_ID and
// CAPSTAN_TENANT_WEIGHTS into c, keeping what it cannot use as problems.
func (c *Config) readDeployment(getenv func(string) string) {
	c.Deployment = Deployment{Name: strings.TrimSpace(getenv("CAPSTAN_DEPLOYMENT_NAME")), BuildID: strings.TrimSpace(getenv("CAPSTAN_BUILD_ID"))}
	if (c.Deployment.Name == "") != (c.Deployment.BuildID == "") {
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_DEPLOYMENT_NAME and CAPSTAN_BUILD_ID are set together or not at all (got name %q, build id %q)",
			c.Deployment.Name, c.Deployment.BuildID))
	}
	// Temporal spells a version DEPLOYMENT.BUILD, so a name holds no '.'.
	if strings.ContainsAny(c.Deployment.Name, ". \t") {
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_DEPLOYMENT_NAME=%q may not hold '.' or spaces", c.Deployment.Name))
	}
	if strings.ContainsAny(c.Deployment.BuildID, " \t") {
		c.problems = append(c.problems, fmt.Errorf("CAPSTAN_BUILD_ID=%q may not hold spaces", c.Deployment.BuildID))
	}
	w, err := ParseTenantWeights(getenv("CAPSTAN_TENANT_WEIGHTS"))
	if err != nil {
		c.problems = append(c.problems, err)
	}
	c.TenantWeights = w
	if v := strings.TrimSpace(getenv("CAPSTAN_ACTIVITY_SLOTS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			c.problems = append(c.problems, fmt.Errorf("CAPSTAN_ACTIVITY_SLOTS=%q is not a whole number of at least 1", v))
		}
		c.ActivitySlots = max(n, 0)
	}
}

// ParseTenantWeights reads `tenant=weight,…` (weights from 0.001 to 1000);
// empty is no weights.
func ParseTenantWeights(v string) (TenantWeights, error) {
	w := TenantWeights{}
	if strings.TrimSpace(v) == "" {
		return w, nil
	}
	for _, part := range strings.Split(v, ",") {
		name, num, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 32)
		name = strings.TrimSpace(name)
		if !ok || name == "" || err != nil || f < minTenantWeight || f > maxTenantWeight {
			return TenantWeights{}, fmt.Errorf("CAPSTAN_TENANT_WEIGHTS=%q: %q is not TENANT=WEIGHT with a weight from 0.001 to 1000 (such as acme=2,beta=0.5)", v, part)
		}
		if _, dup := w[name]; dup {
			return TenantWeights{}, fmt.Errorf("CAPSTAN_TENANT_WEIGHTS=%q names tenant %q twice", v, name)
		}
		w[name] = float32(f)
	}
	return w, nil
}
