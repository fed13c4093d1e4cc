package config

import (
	"fmt"
	"strings"
	"time"
)

// LedgerGC is a worker's periodic run of the ledger's retention, the pass
// `starter gc --older-than` makes once (docs/design.md §5.3).
type LedgerGC struct {
	// Every (CAPSTAN_LEDGER_GC_EVERY) is the time between passes; zero
	// runs none.
	Every time.Duration
	// OlderThan (CAPSTAN_LEDGER_GC_OLDER_THAN) is the pass's --older-than:
	// a chain that wrote more recently is not considered.
	OlderThan time.Duration
}

// nonNegativeDuration reads key as a Go duration of zero or more, or def
// when unset.
func (c *Config) nonNegativeDuration(getenv func(string) string, key string, def time.Duration) time.Duration {
	v := strings.TrimSpace(getenv(key))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		c.problems = append(c.problems, fmt.Errorf("%s=%q is not a Go duration of zero or more, such as 24h (default %s)", key, v, def))
		return def
	}
	return d
}
