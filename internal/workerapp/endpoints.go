package workerapp

import (
	"context"
	"fmt"
	"io"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/metrics"
)

// serveMetrics starts the Prometheus endpoint on addr, unless addr is empty.
// A taken port or an unknown host fails the start, naming the variable.
func (w *Worker) serveMetrics(addr string, stdout io.Writer) error {
	if addr == "" {
		w.logger.Info("metrics are off (CAPSTAN_METRICS_ADDR is empty)")
		return nil
	}
	m, err := metrics.New(w.logger)
	if err != nil {
		return err
	}
	srv, err := m.Serve(addr, w.logger)
	if err != nil {
		_ = m.Close(context.Background())
		return fmt.Errorf("serve metrics on CAPSTAN_METRICS_ADDR=%q: %w", addr, err)
	}
	w.metrics, w.metricsServer = m, srv
	w.logger.Info("metrics served", "url", srv.URL())
	fmt.Fprintf(stdout, "metrics: %s\n", srv.URL())
	return nil
}

// serveLive starts the live stream of model attempts (docs/design.md §9.3)
// on ls.Addr, unless it is empty, to followers presenting ls.Token (or, with
// none, on loopback only). A taken port fails the start, naming the
// variable.
func (w *Worker) serveLive(ls config.LiveStream, stdout io.Writer) error {
	if ls.Addr == "" {
		w.logger.Info("live streams are off (CAPSTAN_STREAM_ADDR is empty): starter follow shows no text of this worker's attempts")
		return nil
	}
	hub := livestream.NewHub(livestream.Options{
		Token: ls.Token, MaxConns: ls.MaxConns, WriteTimeout: ls.WriteTimeout, Logger: w.logger,
	})
	if ls.Token == "" && !ls.Loopback() {
		w.logger.Warn("CAPSTAN_STREAM_TOKEN is not set: the live stream serves loopback clients only, although CAPSTAN_STREAM_ADDR listens beyond loopback",
			"addr", ls.Addr)
	}
	srv, err := livestream.Serve(hub, ls.Addr, w.logger)
	if err != nil {
		return fmt.Errorf("serve live streams on CAPSTAN_STREAM_ADDR=%q: %w", ls.Addr, err)
	}
	hub.SetURL(ls.AdvertisedURL(srv.Addr()))
	w.liveHub, w.liveServer = hub, srv
	w.logger.Info("live streams served", "url", hub.URL())
	fmt.Fprintf(stdout, "live stream: %s\n", hub.URL())
	return nil
}
