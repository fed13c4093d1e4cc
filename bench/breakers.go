package main

// breakersBuilt says whether this capstan has circuit breakers per
// dependency (docs/design.md §7, internal/breaker). While it was false the
// outage row measured "breakers off" only and said "not built yet" for
// "on"; every pool but the outage's "off" run has them, as a worker does by
// default. Pools turn them off as a worker is told to: CAPSTAN_BREAKERS=off
// (pool.go).
const breakersBuilt = true
