package mcp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
)

// Check connects to every server of cfg, as a worker does at start, and
// writes each tool it would offer: its name for the model, its class and
// where that class comes from, its look-up, and its schema hash. It fails
// as a worker would: on the first server it cannot reach or whose tool
// settings name a tool it does not offer.
func Check(ctx context.Context, cfg *Config, w io.Writer, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p, err := Open(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer p.Close()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTOOL\tCLASS\tCLASS FROM\tLOOKUP\tSCHEMA")
	for _, t := range p.Tools() {
		m := Unwrap(t)
		lookup := m.Lookup()
		if lookup == "" {
			lookup = "-"
			if t.Class() == "unsafe" {
				lookup = "- (a lost answer goes to a person)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Server(), t.Name(), t.Class(),
			ClassSource(m.conn.server, m.current()), lookup, m.SchemaHash())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d servers, %d tools\n", len(p.Servers()), len(p.tools))
	return nil
}
