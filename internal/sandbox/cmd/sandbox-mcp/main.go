// Command sandbox-mcp serves the sandbox's MCP server
// (internal/sandbox/mcpserver) over stdio, for a worker to start as an MCP
// server of its CAPSTAN_MCP_CONFIG, or over streamable HTTP with --http:
//
//	sandbox-mcp --state FILE [--schema-version 2] [--http ADDR]
//
// Its tickets, calls and queued faults live in the JSON file --state (made
// empty if absent), which outlives the process: a test scripts faults in
// it and counts the effects, and a server killed mid-call and started
// again still knows what it did. With --http it prints "mcp: URL" once it
// listens. A schema_version in the state file overrides --schema-version.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/capstanhq/capstan/internal/sandbox/mcpserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-mcp:", err)
		os.Exit(1)
	}
}

func run() error {
	state := flag.String("state", "", "the JSON file of the server's state (required)")
	schema := flag.Int("schema-version", 1, "2 gives create_ticket another input schema")
	addr := flag.String("http", "", "serve streamable HTTP on this host:port instead of stdio")
	flag.Parse()
	if *state == "" {
		return fmt.Errorf("--state is required")
	}
	store, err := mcpserver.OpenFile(*state)
	if err != nil {
		return err
	}
	o := mcpserver.Options{SchemaVersion: *schema}
	if st, err := store.Load(); err == nil && st.SchemaVersion > 0 {
		o.SchemaVersion = st.SchemaVersion // the state's, which a test sets
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Stop = ctx.Done()
	if *addr == "" {
		return mcpserver.ServeStdio(ctx, store, o)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("mcp: http://%s/mcp\n", ln.Addr())
	srv := &http.Server{Handler: mcpserver.Handler(store, o)}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
