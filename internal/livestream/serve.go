package livestream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of the endpoint's HTTP server. A stream lasts as long as its
// attempt, so the server has no write timeout of its own: each write of a
// stream has its deadline instead (Hub.ServeHTTP).
const (
	readHeaderTimeout = 10 * time.Second
	// idleTimeout closes a kept-alive connection no request comes on, so
	// idle connections do not hold places under the cap.
	idleTimeout = time.Minute
	// maxHeaderBytes bounds a request's header: an attempt id is a task id
	// and a few characters.
	maxHeaderBytes = 64 << 10
)

// Server serves a Hub over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	stop chan struct{}
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves h
// until Close, holding at most h's MaxConns connections at once (one more
// is answered 503 and closed) and sweeping h on its timer. It returns once
// the address is bound, so a taken port is its error, at startup. When h
// has no URL yet, it gets "http://" and the bound address. logger receives
// an error that ends serving; nil discards it.
func Serve(h *Hub, addr string, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		srv: &http.Server{
			Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		},
		ln:   ln,
		done: make(chan struct{}),
		stop: make(chan struct{}),
	}
	if h.URL() == "" {
		h.SetURL("http://" + ln.Addr().String())
	}
	capped := &capListener{Listener: ln, slots: make(chan struct{}, h.maxConns), refuseWithin: h.writeTimeout}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("livestream: the endpoint stopped serving", "addr", ln.Addr().String(), "error", err)
		}
	}()
	go h.sweepUntil(s.stop)
	return s, nil
}

// Addr is the address the server listens on, with the port it was given.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving. Open streams are cut: their followers reconnect
// elsewhere or read the outcome from the workflow.
func (s *Server) Close(ctx context.Context) error {
	close(s.stop)
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// capListener holds at most cap(slots) connections at once. One more is
// answered "503 Service Unavailable" and closed, so a follower learns why
// rather than waiting in the backlog.
type capListener struct {
	net.Listener
	slots        chan struct{}
	refuseWithin time.Duration
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			go l.refuse(c)
		}
	}
}

// refuse answers c 503 and closes it, within refuseWithin. It reads the
// request's header first: a client is not answered before it asks.
func (l *capListener) refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(l.refuseWithin))
	r := bufio.NewReader(io.LimitReader(c, maxHeaderBytes))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	body := fmt.Sprintf("this worker serves %d live-stream connections at most (CAPSTAN_STREAM_MAX_CONNS); try again later\n", cap(l.slots))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 5\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// slotConn gives its place back when closed (once, before the socket is:
// a client that sees the connection end can connect again at once).
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
