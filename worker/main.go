// Command worker is one capstan worker of a pool: it runs AgentTask
// workflows and their activities from the task queue (CAPSTAN_TASK_QUEUE,
// default "capstan").
//
//	worker            use the endpoints and tokens of the environment
//	worker --sandbox  start the offline sandbox (model, GitHub, Slack) in
//	                  process and point every client at it
//
// Configuration is read from the environment (see the README); secrets stay
// in this process and never enter workflow history. The worker serves
// Prometheus metrics on CAPSTAN_METRICS_ADDR (default 127.0.0.1:9464; set
// it empty for none), and its log lines carry the task, turn, attempt and
// operation ids of the activity that wrote them. SIGINT or SIGTERM stops
// the worker gracefully: it finishes or hands back its running tasks.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// options are the worker's flags.
type options struct {
	sandbox     bool
	logFormat   string
	logLevel    string
	stopTimeout time.Duration
}

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.BoolVar(&o.sandbox, "sandbox", false, "start the offline sandbox (model, GitHub, Slack) and use it instead of real endpoints")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running activities may take to finish")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: worker [--sandbox] [--log-format json|text] [--log-level LEVEL] [--stop-timeout DURATION]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := start(ctx, o, lookupEnv, logger, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 1
	}
	defer w.close()
	if err := w.run(ctx); err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", level)
	}
	ho := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	default:
		return nil, fmt.Errorf("unknown log format %q (want json or text)", format)
	}
}
