package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Link is a TCP proxy between a test's ledger and its PostgreSQL server
// that the test can cut: Down closes every connection through it and
// refuses new ones (the client sees its connection lost, then refused),
// as when the server stops; Up lets connections through again. The server
// itself is shared and is never stopped.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// NewLink proxies the server of dsn, and returns the link and dsn pointed
// at it. The link closes when t ends.
func NewLink(t testing.TB, dsn string) (*Link, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		_ = ln.Close()
		l.Down()
	})
	go l.serve()
	u.Host = ln.Addr().String()
	return l, u.String()
}

func (l *Link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			_ = c.Close() // refused: the server is "down"
			continue
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c], l.conns[s] = true, true
		l.mu.Unlock()
		go pipe(c, s)
		go pipe(s, c)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// Down cuts every connection and refuses new ones until Up.
func (l *Link) Down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		_ = c.Close()
	}
	l.conns = map[net.Conn]bool{}
}

// Up lets connections through again.
func (l *Link) Up() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}
