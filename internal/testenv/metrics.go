package testenv

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one scrape of a Prometheus endpoint: metric families by name.
type Scrape map[string]*dto.MetricFamily

// ScrapeMetrics GETs url and parses the Prometheus text format. Anything but
// a 200 with a body that parses fails the test at once.
func ScrapeMetrics(t testing.TB, url string) Scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: parse the metrics: %v", url, err)
	}
	return fams
}

// Value is the sum over the samples of family name whose labels include
// want: a counter's or a gauge's value, a histogram's sample count. ok is
// false when no sample matches.
func (s Scrape) Value(name string, want map[string]string) (v float64, ok bool) {
	fam := s[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		ok = true
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		case m.GetUntyped() != nil:
			v += m.GetUntyped().GetValue()
		}
	}
	return v, ok
}

// Samples lists family name's samples as "label=value,… value" lines, for a
// failure message.
func (s Scrape) Samples(name string) string {
	fam := s[name]
	if fam == nil {
		return name + ": absent"
	}
	var lines []string
	for _, m := range fam.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v, _ := Scrape{name: &dto.MetricFamily{Metric: []*dto.Metric{m}}}.Value(name, nil)
		lines = append(lines, strings.Join(ls, ",")+" "+strconv.FormatFloat(v, 'g', -1, 64))
	}
	sort.Strings(lines)
	return name + ":\n  " + strings.Join(lines, "\n  ")
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// DashboardPath is the Grafana dashboard docker-compose.yml provisions.
var DashboardPath = filepath.Join(RepoRoot(), "deploy", "grafana", "dashboards", "capstan.json")

// metricName finds the metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\b(?:capstan|temporal|process|go)_[a-z0-9_]+\b`)

// DashboardMetrics returns the metric families the queries of the Grafana
// dashboard at path read (a histogram's _bucket series named by its
// family), each once, sorted.
func DashboardMetrics(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	seen := map[string]bool{}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tg := range p.Targets {
				for _, name := range metricName.FindAllString(tg.Expr, -1) {
					seen[strings.TrimSuffix(name, "_bucket")] = true
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return slices.Sorted(maps.Keys(seen))
}
