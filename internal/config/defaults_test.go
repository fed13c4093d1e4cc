package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// moduleRoot is the repository's root, two levels above this package.
const moduleRoot = "../.."

// The configuration table of docs/configuration.md sits between these comments.
const (
	tableBegin = "<!-- configuration table: generated from internal/config.Settings; CAPSTAN_UPDATE_README=1 go test ./internal/config -run README -->"
	tableEnd   = "<!-- end of configuration table -->"
)

// markdownTable renders Settings as docs/configuration.md shows them.
func markdownTable(settings []Setting) string {
	var b strings.Builder
	b.WriteString("| setting | default | meaning |\n|---|---|---|\n")
	for _, s := range settings {
		meaning := s.Meaning
		if s.Reader != "" {
			meaning = s.Reader + ": " + meaning
		}
		b.WriteString("| `" + s.Name + "` | " + s.Default + " | " + meaning + " |\n")
	}
	return b.String()
}

// TestREADMEConfigurationTableIsSettings fails when docs/configuration.md's table is
// not Settings rendered, so the two cannot drift; with
// CAPSTAN_UPDATE_README=1 it rewrites the table instead.
func TestREADMEConfigurationTableIsSettings(t *testing.T) {
	path := filepath.Join(moduleRoot, "docs", "configuration.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	begin := strings.Index(readme, tableBegin)
	end := strings.Index(readme, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("docs/configuration.md has no configuration table between %q and %q", tableBegin, tableEnd)
	}
	body := begin + len(tableBegin) + 1
	got, want := readme[body:end], markdownTable(Settings)
	if got == want {
		return
	}
	if os.Getenv("CAPSTAN_UPDATE_README") == "1" {
		if err := os.WriteFile(path, []byte(readme[:body]+want+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the configuration table of %s", path)
		return
	}
	gotRows, wantRows := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotRows), len(wantRows)) {
		g, w := row(gotRows, i), row(wantRows, i)
		if g != w {
			t.Fatalf("docs/configuration.md's configuration table differs from config.Settings at row %d:\ndocs:     %s\nSettings: %s\n"+
				"(edit internal/config/defaults.go, then CAPSTAN_UPDATE_README=1 go test ./internal/config -run README)", i+1, g, w)
		}
	}
}

func row(rows []string, i int) string {
	if i < len(rows) {
		return rows[i]
	}
	return "(none)"
}

func TestSettingsAreComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings {
		if s.Name == "" || s.Default == "" || s.Meaning == "" {
			t.Errorf("setting %+v lacks a name, a default or a meaning", s)
		}
		if !slices.Contains([]string{"", "worker", "starter", "worker and starter"}, s.Reader) {
			t.Errorf("%s: reader %q is none of worker, starter, worker and starter", s.Name, s.Reader)
		}
		if seen[s.Name] {
			t.Errorf("%s is listed twice", s.Name)
		}
		seen[s.Name] = true
	}
}

// envName is what an environment variable's name looks like.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)

// TestSettingsListEveryVariableThisPackageReads: every string constant of
// this package's code that names an environment variable has its row in
// Settings (a new variable cannot be read without being documented), and
// every row's variable is read here or by the Temporal SDK's envconfig.
func TestSettingsListEveryVariableThisPackageReads(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	read := map[string]bool{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
					read[s] = true
				}
			}
			return true
		})
	}
	if len(read) < 20 {
		t.Fatalf("found only %d variable names in this package's code: %v", len(read), read)
	}
	listed := map[string]bool{}
	for _, s := range Settings {
		listed[s.Name] = true
	}
	for name := range read {
		if !listed[name] {
			t.Errorf("%s is read by internal/config but has no row in Settings", name)
		}
	}
	sdk := []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} // read by go.temporal.io/sdk/contrib/envconfig
	for _, s := range Settings {
		if envName.MatchString(s.Name) && !read[s.Name] && !slices.Contains(sdk, s.Name) {
			t.Errorf("Settings lists %s, which nothing in internal/config reads", s.Name)
		}
	}
}

// TestSettingsShowTheDefaultsCodeUses: the shown defaults are the values
// FromEnv fills in, for the settings it reads.
func TestSettingsShowTheDefaultsCodeUses(t *testing.T) {
	c := FromEnv(func(string) string { return "" })
	ls, err := LiveStreamFromLookupEnv(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"CAPSTAN_TASK_QUEUE":            c.TaskQueue,
		"CAPSTAN_LEDGER_DSN":            c.LedgerDSN,
		"CAPSTAN_MODEL":                 c.Model,
		"CAPSTAN_UI_URL":                c.UIURL,
		"OPENAI_BASE_URL":               c.OpenAIBaseURL,
		"ANTHROPIC_BASE_URL":            c.AnthropicBaseURL,
		"GITHUB_API_URL":                c.GitHubAPIURL,
		"SLACK_API_URL":                 c.SlackAPIURL,
		"CAPSTAN_MODEL_IDLE_TIMEOUT":    "120s",
		"CAPSTAN_MODEL_MAX_DURATION":    "10m",
		"CAPSTAN_HEARTBEAT_TIMEOUT":     "30s",
		"CAPSTAN_RECONCILE_WINDOW":      "60s",
		"CAPSTAN_MODEL_CONNECT_TIMEOUT": "10s",
		"CAPSTAN_BREAKER_FAILURES":      strconv.Itoa(c.Breakers.ConsecutiveFailures),
		"CAPSTAN_BREAKER_FAILURE_RATIO": strconv.FormatFloat(c.Breakers.FailureRatio, 'g', -1, 64),
		"CAPSTAN_BREAKER_MIN_CALLS":     strconv.Itoa(c.Breakers.MinCalls),
		"CAPSTAN_BREAKER_WINDOW":        "60s",
		"CAPSTAN_BREAKER_OPEN":          "30s",
		"CAPSTAN_LEDGER_OUTAGE_LIMIT":   "30m",
		"CAPSTAN_NAMESPACE_WAIT":        "60s",
		"CAPSTAN_APPROVAL_TIMEOUT":      "168h",
		"CAPSTAN_METRICS_ADDR":          c.MetricsAddr,
		"CAPSTAN_STREAM_ADDR":           ls.Addr,
		"CAPSTAN_STREAM_MAX_CONNS":      strconv.Itoa(ls.MaxConns),
		"CAPSTAN_STREAM_WRITE_TIMEOUT":  "10s",
		"starter run --max-turns":       "20",
		"starter run --human-timeout":   "24h",
	}
	durations := map[string]time.Duration{
		"CAPSTAN_MODEL_IDLE_TIMEOUT":    c.ModelLimits.Idle,
		"CAPSTAN_MODEL_MAX_DURATION":    c.ModelLimits.Total,
		"CAPSTAN_HEARTBEAT_TIMEOUT":     c.ModelLimits.HeartbeatTimeout,
		"CAPSTAN_RECONCILE_WINDOW":      c.ReconcileWindow,
		"CAPSTAN_MODEL_CONNECT_TIMEOUT": c.ModelConnectTimeout,
		"CAPSTAN_BREAKER_WINDOW":        c.Breakers.Window,
		"CAPSTAN_BREAKER_OPEN":          c.Breakers.OpenFor,
		"CAPSTAN_LEDGER_OUTAGE_LIMIT":   c.LedgerOutageLimit,
		"CAPSTAN_NAMESPACE_WAIT":        c.NamespaceWait,
		"CAPSTAN_APPROVAL_TIMEOUT":      c.ApprovalTimeout,
		"starter run --human-timeout":   DefaultHumanTimeout,
		"CAPSTAN_STREAM_WRITE_TIMEOUT":  ls.WriteTimeout,
	}
	for name, d := range durations {
		if shown, err := time.ParseDuration(want[name]); err != nil || shown != d {
			t.Errorf("%s: FromEnv fills %s, the expected shown value is %q", name, d, want[name])
		}
	}
	for _, s := range Settings {
		w, ok := want[s.Name]
		if !ok {
			continue
		}
		delete(want, s.Name)
		if s.Default != "`"+w+"`" {
			t.Errorf("%s shows default %s, want `%s`", s.Name, s.Default, w)
		}
	}
	for name := range want {
		t.Errorf("Settings has no row %s", name)
	}
}

// TestNoDefaultOutsideConfig parses every non-test Go file of the module
// and fails on a top-level identifier named Default… outside
// internal/config: every default lives here.
func TestNoDefaultOutsideConfig(t *testing.T) {
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if abs, _ := filepath.Abs(path); abs == self || (path != moduleRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, name := range topLevelNames(f) {
			if strings.HasPrefix(name.Name, "Default") {
				t.Errorf("%s: %s is a default outside internal/config: move it to internal/config/defaults.go", fset.Position(name.Pos()), name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("parsed only %d files under %s", files, moduleRoot)
	}
}

// topLevelNames are the names f declares at package level, methods aside.
func topLevelNames(f *ast.File) []*ast.Ident {
	var names []*ast.Ident
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names = append(names, d.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					names = append(names, s.Names...)
				case *ast.TypeSpec:
					names = append(names, s.Name)
				}
			}
		}
	}
	return names
}
