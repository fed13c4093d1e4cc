package sandbox

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// FaultRefuseConnection closes the model's port for RefuseFor, so a client's
// dial fails with "connection refused" before a byte of its request is
// written: a true NOT_SENT. The connections already open are closed as soon
// as they are idle, and a request that still arrives on one meanwhile is
// reset as FaultResetConnection does (and counted). The port is the model's
// whole server, so the rule shuts out both wire formats and the
// /_sandbox/ endpoints too, whichever endpoint it names; it needs Times 0,
// cannot be a step's fault (a fault chosen per request comes too late), and
// fires once, when the port closes. Refused dials never reach the fake, so
// nothing counts them: a test counts the requests that got through. The
// port reopens after RefuseFor, or never once the sandbox is closed; it
// needs the model served as [Start] serves it.
const FaultRefuseConnection FaultKind = "refuse_connection"

// modelDoor is the model's port as fault rules see it: the listeners the
// model is served on, which it can close and reopen, and the connections
// open through them.
type modelDoor struct {
	mu        sync.Mutex
	listeners []*doorListener
	conns     map[net.Conn]http.ConnState
	refusing  bool
	timer     *time.Timer
	closed    bool
	onReopen  func() // for tests: runs when the port has reopened
}

// wrap returns ln as a listener the door can close and reopen. Serve the
// model on it, with connState as the server's ConnState hook.
func (d *modelDoor) wrap(ln net.Listener) net.Listener {
	l := &doorListener{ln: ln, addr: ln.Addr()}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.listeners = append(d.listeners, l)
	return l
}

// connState tracks the model's connections, and closes each one that falls
// idle while the port is closed.
func (d *modelDoor) connState(c net.Conn, s http.ConnState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conns == nil {
		d.conns = map[net.Conn]http.ConnState{}
	}
	switch s {
	case http.StateHijacked, http.StateClosed:
		delete(d.conns, c)
		return
	}
	d.conns[c] = s
	if s == http.StateIdle && d.refusing {
		_ = c.Close()
	}
}

// isRefusing reports whether the port is closed now.
func (d *modelDoor) isRefusing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refusing
}

// refuse closes the port and the idle connections, and reopens the port
// after dur (counted from now, also when it was closed already).
func (d *modelDoor) refuse(dur time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.refusing = true
	for _, l := range d.listeners {
		l.pause()
	}
	for c, s := range d.conns {
		if s == http.StateIdle || s == http.StateNew {
			_ = c.Close()
		}
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(dur, d.reopen)
}

// reopen listens again on every address the door closed.
func (d *modelDoor) reopen() {
	d.mu.Lock()
	if d.closed || !d.refusing {
		d.mu.Unlock()
		return
	}
	d.refusing = false
	for _, l := range d.listeners {
		l.resume()
	}
	onReopen := d.onReopen
	d.mu.Unlock()
	if onReopen != nil {
		onReopen()
	}
}

// shutdown stops a pending reopen for good.
func (d *modelDoor) shutdown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// doorListener is a listener that can stop listening and listen again on the
// same address. While paused, Accept waits instead of failing, so the server
// keeps serving the connections it has.
type doorListener struct {
	addr net.Addr

	mu     sync.Mutex
	ln     net.Listener  // the socket; nil while paused or after a failed resume
	hold   io.Closer     // while paused: the port, bound and not listening
	paused bool          // wake is open while paused
	wake   chan struct{} // closed when a paused listener resumes or closes
	closed bool
	err    error // why listening again failed
}

func (l *doorListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		ln, paused, wake, closed, err := l.ln, l.paused, l.wake, l.closed, l.err
		l.mu.Unlock()
		switch {
		case closed:
			return nil, net.ErrClosed
		case paused:
			<-wake
			continue
		case err != nil:
			return nil, err
		}
		c, err := ln.Accept()
		if err == nil {
			return c, nil
		}
		l.mu.Lock()
		pausedSince := l.ln != ln && !l.closed
		l.mu.Unlock()
		if !pausedSince {
			return nil, err
		}
	}
}

// pause stops listening: dials to the address are refused. The port stays
// bound (holdPort) before the listener closes, so no other server can be
// given it meanwhile; where it cannot be held it is closed all the same.
func (l *doorListener) pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.paused || l.ln == nil {
		return
	}
	l.hold, _ = holdPort(l.addr)
	_ = l.ln.Close()
	l.ln, l.paused, l.wake = nil, true, make(chan struct{})
}

// release lets the held port go.
func (l *doorListener) release() {
	if l.hold != nil {
		_ = l.hold.Close()
		l.hold = nil
	}
}

// resume listens on the address again, before it lets the held port go. If
// the port could not be held and another process took it meanwhile, Accept
// reports why, which ends the server: better than a port that silently
// never reopens.
func (l *doorListener) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.paused {
		return
	}
	l.ln, l.err = listenShared(l.addr.String())
	l.release()
	l.paused = false
	close(l.wake)
}

func (l *doorListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.release()
	if l.paused {
		close(l.wake)
		return nil
	}
	if l.ln == nil {
		return nil
	}
	return l.ln.Close()
}

func (l *doorListener) Addr() net.Addr { return l.addr }
