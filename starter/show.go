package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/workflows"
)

// showCommand prints the whole call an operation asks a person to approve
// (docs/design.md §5.9): every argument uncut, read from the ledger (the
// task's history holds only the reference and the capped fields), and the
// SHA-256 of the canonical call, which `starter approve --hash` carries.
func (a *app) showCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show TASK_ID OPERATION_ID",
		Short: "Print the whole call an operation waits for approval of, and its sha256",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: a.withClient(func(ctx context.Context, c client.Client, _ client.Options, args []string) error {
			taskID := args[0]
			res, _, err := taskStatus(ctx, c, taskID)
			if err != nil {
				return err
			}
			id, err := workflows.MatchOperation(workflows.OperationIDs(res), args[1])
			if err != nil {
				return usagef("task %s has %v", taskID, err)
			}
			var op workflows.OperationRecord
			for _, o := range res.Operations {
				if o.OperationID == id {
					op = o
				}
			}
			if op.Arguments == "" {
				return usagef("operation %s of task %s never waited for approval of a call bound to its hash; starter status %s shows it", id, taskID, taskID)
			}
			text, err := a.wholeCall(ctx, op)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "task %s, operation %s (%s): %s\n%s\n", taskID, id, op.State, op.Summary, text)
			return nil
		}),
	}
}

// wholeCall is op's call as `starter show` prints it: its arguments read
// from the ledger, each field whole, and the canonical call's hash, which
// must be the one the task recorded.
func (a *app) wholeCall(ctx context.Context, op workflows.OperationRecord) (string, error) {
	quiet := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	keys, err := codec.New(a.cfg.CodecKeys)
	if err != nil {
		return "", err
	}
	st, err := ledgerdsn.Open(ctx, a.cfg.LedgerDSN, ledgerdsn.Options{Logger: quiet, Sealer: codec.Sealer(keys)})
	if err != nil {
		return "", err
	}
	defer st.Close()
	args, err := st.GetItem(ctx, op.Arguments)
	if errors.Is(err, ledger.ErrNotFound) {
		return "", fmt.Errorf("the arguments of operation %s (%s) are not in the ledger at %s", op.OperationID, op.Arguments, a.cfg.LedgerDSN)
	}
	if err != nil {
		return "", fmt.Errorf("read the arguments of operation %s: %w", op.OperationID, err)
	}
	_, hash, err := contract.CanonicalCall(op.Tool, args)
	if err != nil {
		return "", err
	}
	if hash != op.CallHash {
		return "", fmt.Errorf("the arguments of operation %s in the ledger hash to %s, not to the %s the task recorded", op.OperationID, hash, op.CallHash)
	}
	fields, err := contract.CallFields(args, len(args), len(args))
	if err != nil {
		return "", err
	}
	return contract.FormatCall(op.Tool, hash, fields), nil
}
