//go:build !unix

package sandbox

import (
	"io"
	"net"
)

// listenShared listens on addr. Without SO_REUSEPORT the model's port is
// free while FaultRefuseConnection keeps it closed, and another server
// asking for any free port may be given it.
func listenShared(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// holdPort holds nothing where SO_REUSEPORT is not available.
func holdPort(net.Addr) (io.Closer, error) { return nil, nil }
