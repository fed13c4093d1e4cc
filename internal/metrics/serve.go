package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Path is where the metrics are served.
const Path = "/metrics"

// Server serves a registry over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves m's
// metrics at Path until Close. It returns once the address is bound, so a
// taken port or an unknown host is its error, at startup, not later.
// logger receives an error that ends serving; nil discards it.
func (m *Metrics) Serve(addr string, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, m.Handler())
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics: the endpoint stopped serving", "addr", ln.Addr().String(), "error", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on, with the port it was given.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the http URL of the metrics.
func (s *Server) URL() string { return fmt.Sprintf("http://%s%s", s.Addr(), Path) }

// Close stops serving, letting a scrape in progress finish within ctx.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
