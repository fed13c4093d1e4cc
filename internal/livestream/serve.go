package livestream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves a Hub over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// until Close. It returns once the address is bound, so a taken port is its
// error, at startup. When h has no URL yet, it gets "http://" and the bound
// address. logger receives an error that ends serving; nil discards it.
func Serve(h *Hub, addr string, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		// No write timeout: a stream lasts as long as its attempt.
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan struct{}),
	}
	if h.URL() == "" {
		h.SetURL("http://" + ln.Addr().String())
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("livestream: the endpoint stopped serving", "addr", ln.Addr().String(), "error", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on, with the port it was given.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving. Open streams are cut: their followers reconnect
// elsewhere or read the outcome from the workflow.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
