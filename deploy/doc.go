// Package deploy holds what runs capstan beside its binaries: the
// Prometheus and Grafana configuration here, and docker-compose.yml at the
// repository's root. It has no code; its tests hold those files to the
// rules docs/configuration.md states.
package deploy
