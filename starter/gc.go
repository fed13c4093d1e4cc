package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/ledgergc"
)

// gcCommand is `starter gc --older-than DURATION [--dry-run]`: the ledger's
// retention (docs/design.md §9.3), run once against CAPSTAN_LEDGER_DSN.
func (a *app) gcCommand() *cobra.Command {
	var olderThan string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc --older-than DURATION [--dry-run]",
		Short: "Delete the ledger rows of tasks that are closed and that Temporal no longer has (past their namespace's retention)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usagef("gc needs --older-than DURATION, such as 720h: only tasks that have not written for that long are considered")
			}
			d, err := time.ParseDuration(olderThan)
			if err != nil || d < 0 {
				return usagef("--older-than %q is not a Go duration of zero or more, such as 720h", olderThan)
			}
			return a.withClient(func(ctx context.Context, c client.Client, copts client.Options, _ []string) error {
				return a.gc(ctx, c, copts.Namespace, d, dryRun)
			})(cmd, nil)
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "consider only tasks whose last ledger write is at least this old (a Go duration: 720h, 0s)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be deleted and delete nothing")
	return cmd
}

func (a *app) gc(ctx context.Context, c client.Client, namespace string, olderThan time.Duration, dryRun bool) error {
	quiet := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	keys, err := codec.New(a.cfg.CodecKeys)
	if err != nil {
		return err
	}
	st, err := ledgerdsn.Open(ctx, a.cfg.LedgerDSN, ledgerdsn.Options{Logger: quiet, Sealer: codec.Sealer(keys)})
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := ledgergc.Run(ctx, st, c.WorkflowService(), ledgergc.Options{Namespace: namespace, OlderThan: olderThan, DryRun: dryRun, Logger: quiet})
	var refused *ledgergc.RefusedError
	if errors.As(err, &refused) {
		return err // one sentence: it deleted nothing
	}
	if rep.Adopted != nil {
		fmt.Fprintf(a.stderr, "recorded namespace %s of Temporal cluster %s as the one this ledger serves\n", rep.Adopted.Namespace, rep.Adopted.ClusterID)
	}
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	r := rep.Removed
	fmt.Fprintf(a.stdout, "%s %d task(s): %d operation(s), %d turn(s), %d item(s), %d bytes\n", verb, r.Tasks, r.Operations, r.Turns, r.Items, r.Bytes)
	fmt.Fprintf(a.stdout, "kept %d of %d task(s) older than %s that Temporal still has; %d could not be checked\n",
		rep.Kept, rep.Considered, olderThan, rep.Unchecked)
	if u := rep.Unscoped; u.Operations+u.Turns > 0 {
		fmt.Fprintf(a.stdout, "left alone: %d operation(s) and %d turn(s) of tasks started before ledger keys were scoped\n", u.Operations, u.Turns)
	}
	return err
}
