package main

import (
	"context"
	"path"
	"sync"

	"google.golang.org/grpc"
)

// rpcCounter counts the gRPC calls a pool's workers make to the Temporal
// server, by method: what each task costs the server beyond its history.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int64
}

func newRPCCounter() *rpcCounter { return &rpcCounter{calls: map[string]int64{}} }

// interceptor counts every unary call through the connection.
func (c *rpcCounter) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls[path.Base(method)]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// take returns the counts so far and starts again from zero.
func (c *rpcCounter) take() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int64{}
	return out
}
