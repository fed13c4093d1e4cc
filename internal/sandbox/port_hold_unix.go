//go:build unix

package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenShared listens on addr with SO_REUSEPORT set, so that a port
// placeholder ([holdPort]) can be bound to the same address before the
// listener closes, and a new listener before the placeholder goes: the
// address is never free for another server to take while the model's port
// is closed. A port asked for as :0 is still one no other socket holds.
func listenShared(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return setReusePort(c)
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

func setReusePort(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}

// holdPort binds a socket to addr without listening on it. While it is
// bound, a dial to addr is refused (nothing listens) and no other server
// is given the port — closing the listener alone would free it, and a
// server elsewhere asking for any free port could be handed it and answer
// the dials meant to be refused.
func holdPort(addr net.Addr) (io.Closer, error) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("sandbox: hold port: %s is not a TCP address", addr)
	}
	var (
		sa     unix.Sockaddr
		family = unix.AF_INET
	)
	if ip4 := tcp.IP.To4(); ip4 != nil {
		s := &unix.SockaddrInet4{Port: tcp.Port}
		copy(s.Addr[:], ip4)
		sa = s
	} else {
		family = unix.AF_INET6
		s := &unix.SockaddrInet6{Port: tcp.Port}
		copy(s.Addr[:], tcp.IP.To16())
		sa = s
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: hold port %s: %w", addr, err)
	}
	// SO_REUSEPORT alone: it lets the placeholder share the address with
	// the model's own listeners, while SO_REUSEADDR would let any socket
	// that sets it (Go's listeners all do) bind beside a socket that is
	// not listening.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("sandbox: hold port %s: %w", addr, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("sandbox: hold port %s: %w", addr, err)
	}
	return fdCloser(fd), nil
}

type fdCloser int

func (fd fdCloser) Close() error { return unix.Close(int(fd)) }
