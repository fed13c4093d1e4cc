// Command worker is a capstan worker that also offers the team's
// tickets_create tool, acting on the ticket service at TICKETS_URL. The
// rest of its configuration is capstan's (docs/configuration.md): the
// Temporal address, the ledger, the model providers' keys, GitHub, Slack.
//
//	TICKETS_URL=https://tickets.internal worker
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"example.com/tickets"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	base := os.Getenv("TICKETS_URL")
	if base == "" {
		return fmt.Errorf("TICKETS_URL is not set: it names the ticket service, e.g. https://tickets.internal")
	}
	create, err := tickets.NewCreateTool(base, &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	return worker.Run(ctx, worker.Options{
		Tools:  []tool.Tool{create},
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)),
		Stdout: os.Stdout,
	})
}
