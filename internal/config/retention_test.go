package config

import (
	"strings"
	"testing"
	"time"
)

// The worker's ledger retention is off unless asked, considers tasks idle
// for 720h by default, and a value that is not a duration of zero or more
// stops the worker with one sentence naming the variable.
func TestLedgerGCSettings(t *testing.T) {
	env := func(kv map[string]string) Config { return FromEnv(func(k string) string { return kv[k] }) }
	if c := env(nil); c.LedgerGC != (LedgerGC{Every: 0, OlderThan: 720 * time.Hour}) {
		t.Fatalf("defaults = %+v, want off and 720h", c.LedgerGC)
	}
	c := env(map[string]string{"CAPSTAN_LEDGER_GC_EVERY": "1h", "CAPSTAN_LEDGER_GC_OLDER_THAN": "0s"})
	if c.LedgerGC != (LedgerGC{Every: time.Hour}) {
		t.Fatalf("set = %+v, want every 1h, older than 0s", c.LedgerGC)
	}
	for _, bad := range []string{"-1h", "daily"} {
		c := env(map[string]string{"CAPSTAN_LEDGER_GC_EVERY": bad, "OPENAI_API_KEY": "k", "GITHUB_TOKEN": "t"})
		if err := c.ValidateWorker(); err == nil || !strings.Contains(err.Error(), "CAPSTAN_LEDGER_GC_EVERY") {
			t.Errorf("CAPSTAN_LEDGER_GC_EVERY=%s: ValidateWorker = %v, want an error naming the variable", bad, err)
		}
	}
}
