package config

import (
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestFromEnvFillsEveryDefault(t *testing.T) {
	c := FromEnv(env(nil))
	want := map[string][2]string{
		"TaskQueue":     {c.TaskQueue, DefaultTaskQueue},
		"LedgerDSN":     {c.LedgerDSN, DefaultLedgerDSN},
		"Model":         {c.Model, DefaultModel},
		"UIURL":         {c.UIURL, DefaultUIURL},
		"OpenAIBaseURL": {c.OpenAIBaseURL, DefaultOpenAIBaseURL},
		"GitHubAPIURL":  {c.GitHubAPIURL, DefaultGitHubAPIURL},
		"SlackAPIURL":   {c.SlackAPIURL, DefaultSlackAPIURL},
		"BaseBranch":    {c.BaseBranch, DefaultBaseBranch},
	}
	for name, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %q, want %q", name, v[0], v[1])
		}
	}
	if c.Lease != DefaultLease || c.ModelConnectTimeout != DefaultConnectTimeout {
		t.Errorf("Lease, ModelConnectTimeout = %s, %s", c.Lease, c.ModelConnectTimeout)
	}
	if c.ModelLimits != DefaultModelLimits { // FirstEvent unset: it follows the idle timeout
		t.Errorf("ModelLimits = %+v, want %+v", c.ModelLimits, DefaultModelLimits)
	}
	if err := c.ValidateStarter(); err != nil {
		t.Errorf("ValidateStarter() = %v", err)
	}
	if err := c.ValidateWorker(); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("ValidateWorker() without keys = %v, want the missing OPENAI_API_KEY named", err)
	}
}

func TestFromEnvRefusesLimitsThatCannotWork(t *testing.T) {
	c := FromEnv(env(map[string]string{"CAPSTAN_MODEL_IDLE_TIMEOUT": "5m", "CAPSTAN_MODEL_MAX_DURATION": "1m",
		"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g"}))
	err := c.ValidateWorker()
	if err == nil || !strings.Contains(err.Error(), "the idle timeout (5m0s) must be shorter than the attempt's total limit (1m0s)") {
		t.Fatalf("ValidateWorker() = %v, want the idle timeout refused", err)
	}
}

func TestFromEnvReadsLimitsAndURLs(t *testing.T) {
	c := FromEnv(env(map[string]string{
		"CAPSTAN_MODEL_IDLE_TIMEOUT": "5s", "CAPSTAN_MODEL_MAX_DURATION": "1m", "CAPSTAN_HEARTBEAT_TIMEOUT": "9s",
		"GITHUB_API_URL": "https://ghe.example.com/api/v3", "CAPSTAN_UI_URL": "http://ui:8233/",
		"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g",
	}))
	// FirstEvent stays unset: it follows the idle timeout a task may set.
	want := ModelLimits{Idle: 5 * time.Second, Total: time.Minute, HeartbeatTimeout: 9 * time.Second}
	if c.ModelLimits != want {
		t.Errorf("ModelLimits = %+v, want %+v", c.ModelLimits, want)
	}
	if c.GitHubAPIURL != "https://ghe.example.com/api/v3/" || c.UIURL != "http://ui:8233" {
		t.Errorf("GitHubAPIURL, UIURL = %q, %q", c.GitHubAPIURL, c.UIURL)
	}
	if err := c.ValidateWorker(); err != nil {
		t.Errorf("ValidateWorker() = %v", err)
	}
}

func TestBadDurationsAreOneSentenceForEachBinary(t *testing.T) {
	c := FromEnv(env(map[string]string{"CAPSTAN_MODEL_IDLE_TIMEOUT": "soon", "CAPSTAN_HEARTBEAT_TIMEOUT": "-3s",
		"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g"}))
	for name, err := range map[string]error{"worker": c.ValidateWorker(), "starter": c.ValidateStarter()} {
		if err == nil {
			t.Fatalf("%s: no error for bad durations", name)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, `CAPSTAN_MODEL_IDLE_TIMEOUT="soon"`) || !strings.Contains(msg, `CAPSTAN_HEARTBEAT_TIMEOUT="-3s"`) {
			t.Errorf("%s: %q, want one line naming both variables", name, msg)
		}
	}
}

// TestSandboxTaskQueue: starter demo keeps to the sandbox's own queue
// unless CAPSTAN_TASK_QUEUE names another one than the queue of real tasks.
func TestSandboxTaskQueue(t *testing.T) {
	for queue, want := range map[string]string{"": DefaultSandboxTaskQueue, DefaultTaskQueue: DefaultSandboxTaskQueue, "e2e-q": "e2e-q"} {
		c := FromEnv(env(map[string]string{"CAPSTAN_TASK_QUEUE": queue}))
		if got := c.SandboxTaskQueue(); got != want {
			t.Errorf("CAPSTAN_TASK_QUEUE=%q: SandboxTaskQueue() = %q, want %q", queue, got, want)
		}
	}
}

func TestMetricsAddr(t *testing.T) {
	keys := map[string]string{"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g"}
	lookup := func(extra map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if v, ok := extra[k]; ok {
				return v, true
			}
			v, ok := keys[k]
			return v, ok
		}
	}
	if c := FromLookupEnv(lookup(nil)); c.MetricsAddr != DefaultMetricsAddr || c.ValidateWorker() != nil {
		t.Errorf("unset: MetricsAddr %q, ValidateWorker %v; want %q and no error", c.MetricsAddr, c.ValidateWorker(), DefaultMetricsAddr)
	}
	if c := FromLookupEnv(lookup(map[string]string{"CAPSTAN_METRICS_ADDR": ""})); c.MetricsAddr != "" || c.ValidateWorker() != nil {
		t.Errorf("set empty: MetricsAddr %q, ValidateWorker %v; want off and no error", c.MetricsAddr, c.ValidateWorker())
	}
	for _, ok := range []string{":9464", "0.0.0.0:9100", "[::1]:0", "worker-1:9464"} {
		if err := FromLookupEnv(lookup(map[string]string{"CAPSTAN_METRICS_ADDR": ok})).ValidateWorker(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"9464", "localhost", "127.0.0.1:http", "127.0.0.1:70000", "::1:9464"} {
		err := FromLookupEnv(lookup(map[string]string{"CAPSTAN_METRICS_ADDR": bad})).ValidateWorker()
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), `CAPSTAN_METRICS_ADDR="`+bad+`"`) {
			t.Errorf("%q: %v, want one line naming the variable and its value", bad, err)
		}
	}
	// FromEnv's getenv cannot say "set but empty": the default stands.
	if c := FromEnv(env(map[string]string{"CAPSTAN_METRICS_ADDR": ""})); c.MetricsAddr != DefaultMetricsAddr {
		t.Errorf("FromEnv with an empty value: %q, want the default", c.MetricsAddr)
	}
}

func TestFromEnvReadsBreakerSettings(t *testing.T) {
	if c := FromEnv(env(nil)); c.Breakers != DefaultBreakerSettings || c.BreakersOff {
		t.Errorf("Breakers = %+v (off %t), want the defaults of docs/design.md §7, on", c.Breakers, c.BreakersOff)
	}
	c := FromEnv(env(map[string]string{
		"CAPSTAN_BREAKER_FAILURES": "2", "CAPSTAN_BREAKER_FAILURE_RATIO": "0.25", "CAPSTAN_BREAKER_MIN_CALLS": "4",
		"CAPSTAN_BREAKER_WINDOW": "10s", "CAPSTAN_BREAKER_OPEN": "3s", "CAPSTAN_BREAKERS": "off",
		"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g",
	}))
	want := BreakerSettings{ConsecutiveFailures: 2, FailureRatio: 0.25, MinCalls: 4, Window: 10 * time.Second, OpenFor: 3 * time.Second}
	if c.Breakers != want || !c.BreakersOff {
		t.Errorf("Breakers = %+v (off %t), want %+v, off", c.Breakers, c.BreakersOff, want)
	}
	if err := c.ValidateWorker(); err != nil {
		t.Errorf("ValidateWorker() = %v", err)
	}
	bad := FromEnv(env(map[string]string{
		"CAPSTAN_BREAKER_FAILURES": "0", "CAPSTAN_BREAKER_FAILURE_RATIO": "50%", "CAPSTAN_BREAKER_MIN_CALLS": "many",
		"CAPSTAN_BREAKER_OPEN": "-1s", "CAPSTAN_BREAKERS": "sometimes", "OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g",
	}))
	err := bad.ValidateWorker()
	for _, key := range []string{"CAPSTAN_BREAKER_FAILURES", "CAPSTAN_BREAKER_FAILURE_RATIO", "CAPSTAN_BREAKER_MIN_CALLS", "CAPSTAN_BREAKER_OPEN", "CAPSTAN_BREAKERS"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("ValidateWorker() = %v, want %s named", err, key)
		}
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("ValidateWorker() is not one line: %q", err)
	}
}

func TestAnthropicKeyAndBaseURL(t *testing.T) {
	c := FromEnv(env(nil))
	if c.AnthropicBaseURL != DefaultAnthropicBaseURL || c.AnthropicAPIKey != "" || c.HasProviderKey("anthropic") {
		t.Errorf("defaults: AnthropicBaseURL %q, key set %t", c.AnthropicBaseURL, c.HasProviderKey("anthropic"))
	}
	c = FromEnv(env(map[string]string{"ANTHROPIC_API_KEY": "sk-ant", "ANTHROPIC_BASE_URL": "http://proxy:8080/anthropic"}))
	if c.AnthropicAPIKey != "sk-ant" || c.AnthropicBaseURL != "http://proxy:8080/anthropic/" || !c.HasProviderKey("anthropic") {
		t.Errorf("AnthropicAPIKey %q, AnthropicBaseURL %q", c.AnthropicAPIKey, c.AnthropicBaseURL)
	}
}

func TestValidateWorkerModelKeys(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "" for no error; else a part of the one-line error
	}{
		{"no key at all", map[string]string{}, "OPENAI_API_KEY is not set"},
		{"no key names both", map[string]string{}, "ANTHROPIC_API_KEY"},
		{"openai only", map[string]string{"OPENAI_API_KEY": "k"}, ""},
		{"anthropic only, default model not set explicitly", map[string]string{"ANTHROPIC_API_KEY": "k"}, ""},
		{"anthropic model with its key", map[string]string{"ANTHROPIC_API_KEY": "k", "CAPSTAN_MODEL": "anthropic:claude-sonnet-4-5"}, ""},
		{"anthropic model without its key", map[string]string{"OPENAI_API_KEY": "k", "CAPSTAN_MODEL": "anthropic:claude-sonnet-4-5"},
			"CAPSTAN_MODEL=anthropic:claude-sonnet-4-5 names the anthropic provider, but ANTHROPIC_API_KEY is not set"},
		{"openai model without its key", map[string]string{"ANTHROPIC_API_KEY": "k", "CAPSTAN_MODEL": "openai:gpt-4.1"},
			"but OPENAI_API_KEY is not set"},
		{"sandbox model needs no key", map[string]string{"OPENAI_API_KEY": "k", "CAPSTAN_MODEL": "sandbox:demo"}, ""},
		{"a malformed model is the starter's to report", map[string]string{"OPENAI_API_KEY": "k", "CAPSTAN_MODEL": "gpt-4.1"}, ""},
		{"bad ANTHROPIC_BASE_URL", map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "api.anthropic.com"},
			`ANTHROPIC_BASE_URL="api.anthropic.com/" is not an http or https URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{"GITHUB_TOKEN": "g"}
			for k, v := range tt.env {
				e[k] = v
			}
			err := FromEnv(env(e)).ValidateWorker()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ValidateWorker() = %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("ValidateWorker() = %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

func TestModelLimitsValidateRefusesAFirstEventWaitPastTheTotal(t *testing.T) {
	l := ModelLimits{FirstEvent: 2 * time.Minute, Idle: 30 * time.Second, Total: time.Minute, HeartbeatTimeout: 30 * time.Second}
	err := l.Validate()
	if err == nil || err.Error() != "the first-event timeout (2m0s) must be shorter than the attempt's total limit (1m0s)" {
		t.Fatalf("Validate() = %v, want the first-event timeout refused", err)
	}
	l.FirstEvent = 0 // follows the idle timeout
	if err := l.Validate(); err != nil {
		t.Fatalf("Validate() with the first-event wait unset = %v", err)
	}
}

func TestCheckModelKeyNamesTheMissingKeyOfAnExplicitModel(t *testing.T) {
	for model, want := range map[string]string{
		"anthropic:claude-sonnet-4-5": "ANTHROPIC_API_KEY is not set",
		"sandbox:demo":                "", // a sandbox needs no key
		"anthropic:":                  "", // malformed: the starter reports it
		"nonsense":                    "",
	} {
		c := FromEnv(env(map[string]string{"CAPSTAN_MODEL": model, "OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g"}))
		err := c.ValidateWorker()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CAPSTAN_MODEL=%s: ValidateWorker() = %v, want %q", model, err, want)
		}
	}
}
