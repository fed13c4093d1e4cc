package main

import (
	"fmt"
	"io"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/livestream"
)

// serveLive starts the live stream of model attempts (docs/design.md §9.3)
// on ls.Addr, unless it is empty, to followers presenting ls.Token (or, with
// none, on loopback only). A taken port fails the start, naming the
// variable.
func (p *process) serveLive(ls config.LiveStream, stdout io.Writer) error {
	if ls.Addr == "" {
		p.logger.Info("live streams are off (CAPSTAN_STREAM_ADDR is empty): starter follow shows no text of this worker's attempts")
		return nil
	}
	hub := livestream.NewHub(livestream.Options{
		Token: ls.Token, MaxConns: ls.MaxConns, WriteTimeout: ls.WriteTimeout, Logger: p.logger,
	})
	if ls.Token == "" && !ls.Loopback() {
		p.logger.Warn("CAPSTAN_STREAM_TOKEN is not set: the live stream serves loopback clients only, although CAPSTAN_STREAM_ADDR listens beyond loopback",
			"addr", ls.Addr)
	}
	srv, err := livestream.Serve(hub, ls.Addr, p.logger)
	if err != nil {
		return fmt.Errorf("serve live streams on CAPSTAN_STREAM_ADDR=%q: %w", ls.Addr, err)
	}
	hub.SetURL(ls.AdvertisedURL(srv.Addr()))
	p.liveHub, p.liveServer = hub, srv
	p.logger.Info("live streams served", "url", hub.URL())
	fmt.Fprintf(stdout, "live stream: %s\n", hub.URL())
	return nil
}
