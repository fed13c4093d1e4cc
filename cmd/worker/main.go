// Command worker is one capstan worker of a pool: it runs AgentTask
// workflows and their activities from the task queue (CAPSTAN_TASK_QUEUE,
// default "capstan").
//
//	worker [--log-format json|text] [--log-level LEVEL] [--stop-timeout DURATION]
//	worker --mcp-check FILE
//
// With --mcp-check the worker only connects to every MCP server of FILE
// (the CAPSTAN_MCP_CONFIG format), lists the tools it would offer with
// their classes, and exits: 0 when every server answered, 1 with one
// sentence naming the server and the field otherwise.
//
// Configuration is read from the environment (docs/configuration.md); secrets stay
// in this process and never enter workflow history. The worker reaches the
// model providers, GitHub and Slack at the base URLs of its environment
// (OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GITHUB_API_URL, SLACK_API_URL), so
// for the offline demo it is pointed at the sandbox program
// (internal/sandbox/cmd/sandbox), which it does not contain. It serves
// Prometheus metrics on CAPSTAN_METRICS_ADDR (default 127.0.0.1:9464; set it
// empty for none), and its log lines carry the task, turn, attempt and
// operation ids of the activity that wrote them. SIGINT or SIGTERM stops the
// worker gracefully: it finishes or hands back its running tasks.
//
// The wiring lives in internal/workerapp, which the public package
// github.com/capstanhq/capstan/worker also builds on; this is its main.
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

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/redact"
	"github.com/capstanhq/capstan/internal/workerapp"
)

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// sandboxGone answers the flag `worker --sandbox` had, so a script that
// still passes it learns what replaced it.
const sandboxGone = "--sandbox is gone: the sandbox is its own program. Start it with `go run ./internal/sandbox/cmd/sandbox` " +
	"(or `make demo`), which prints the environment that points an ordinary worker at it; see the README"

func run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		logFormat, logLevel string
		stopTimeout         time.Duration
		mcpCheck            string
	)
	fs.StringVar(&mcpCheck, "mcp-check", "", "connect to the MCP servers of this file, list their tools with their classes, and exit")
	fs.StringVar(&logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&stopTimeout, "stop-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running activities may take to finish")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: worker [--log-format json|text] [--log-level LEVEL] [--stop-timeout DURATION]")
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "--sandbox" || a == "-sandbox" {
			fmt.Fprintf(stderr, "worker: %s\n", sandboxGone)
			return 2
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(stderr, logFormat, logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	// No sentence the worker prints quotes a secret of its environment.
	cfg := config.FromLookupEnv(lookupEnv)
	if mcpCheck != "" {
		return checkMCP(mcpCheck, lookupEnv, cfg.Secrets(), stdout, stderr)
	}
	secrets := redact.New(cfg.Secrets()...)
	live, err := config.LiveStreamFromLookupEnv(lookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", secrets.Error(err))
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = workerapp.Run(ctx, workerapp.Options{
		Config:      cfg,
		LookupEnv:   lookupEnv,
		LiveStream:  live,
		Logger:      logger,
		Stdout:      stdout,
		StopTimeout: stopTimeout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", secrets.Error(err))
		return 1
	}
	return 0
}

// checkMCP is worker --mcp-check FILE; its sentence masks secrets and
// what the file's ${VAR} expanded to.
func checkMCP(file string, lookupEnv func(string) (string, bool), secrets []string, stdout, stderr io.Writer) int {
	cfg, held, err := workerapp.LoadMCP(file, lookupEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err = mcp.Check(ctx, cfg, stdout, nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", redact.New(append(secrets, held...)...).Error(err))
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
