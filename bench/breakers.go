package main

import (
	"fmt"

	"github.com/capstanhq/capstan/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/metrics"
)

// breakersBuilt says whether this capstan has circuit breakers per
// dependency (docs/design.md §7, internal/breaker). While it was false the
// outage row measured "breakers off" only and said "not built yet" for
// "on"; every pool but the outage's "off" run has them, as a worker does by
// default.
const breakersBuilt = true

// configureBreakers turns the breakers of one worker's activities on or
// off, as worker/worker.go does from CAPSTAN_BREAKERS and the
// CAPSTAN_BREAKER_* thresholds (here their defaults), reporting their
// transitions to m. It is the only place the bench knows how breakers are
// wired.
func configureBreakers(d *activities.Deps, on bool, m *metrics.Metrics) error {
	if !on {
		d.Breakers = nil // a nil Set lets every call through
		return nil
	}
	cfg := config.FromEnv(func(string) string { return "" })
	opts := breaker.Options{Logger: d.Logger}
	if m != nil {
		opts.OnStateChange = func(t breaker.Transition) { m.BreakerTransition(string(t.Key), string(t.From), string(t.To)) }
	}
	set, err := breaker.NewSet(cfg.Breakers, opts)
	if err != nil {
		return fmt.Errorf("breakers: %w", err)
	}
	d.Breakers = set
	return nil
}
