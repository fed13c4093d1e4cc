package worker

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/redact"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/tool"
)

// Options configure a worker. The zero value is a worker configured by its
// environment alone, as the binary cmd/worker is; each field set here
// takes precedence over the environment variable named beside it.
type Options struct {
	// Client is the Temporal client the worker uses; the worker never
	// closes it. Nil: the worker dials one from Temporal's environment
	// configuration of the process (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE
	// and the rest, read from os.Getenv, not LookupEnv), with capstan's
	// payload codec when CAPSTAN_CODEC_KEYS is set, and closes it. A given
	// client keeps its own data converter, so CAPSTAN_CODEC_KEYS is then
	// refused ([ErrCodecWithClient]), and its own metrics handler: the
	// worker's metrics endpoint then serves capstan's metrics without the
	// Temporal SDK's.
	Client client.Client
	// Namespace is the namespace Client was dialled for; empty means
	// TEMPORAL_NAMESPACE, else "default". Only with Client.
	Namespace string
	// TaskQueue is the queue the worker polls (CAPSTAN_TASK_QUEUE, default
	// "capstan"). A Registration ignores it: the program's worker has its
	// own.
	TaskQueue string
	// LedgerDSN is the ledger's database (CAPSTAN_LEDGER_DSN):
	// sqlite:///path or postgres://….
	LedgerDSN string
	// Tools are the program's own tools, offered to the model beside the
	// built-in and MCP ones. A name another tool has is refused
	// ([ErrDuplicateTool]), as is a tool the worker could not offer
	// ([ErrInvalidTool]).
	Tools []tool.Tool
	// MCPConfig is the file of the MCP servers whose tools the worker
	// offers (CAPSTAN_MCP_CONFIG); its ${VAR} expand through LookupEnv.
	MCPConfig string
	// PolicyFile is the worker's own policy, decided beside each task's
	// (CAPSTAN_POLICY).
	PolicyFile string
	// LookupEnv is the environment the rest of the configuration is read
	// from (docs/configuration.md); nil means os.LookupEnv. A variable set
	// empty differs from one unset: CAPSTAN_METRICS_ADDR="" serves no
	// metrics, unset serves them on 127.0.0.1:9464.
	LookupEnv func(key string) (value string, ok bool)
	// Logger receives the worker's log lines, those of an activity with
	// its task, turn, attempt and operation ids; nil discards them.
	Logger *slog.Logger
	// Stdout receives the lines a person starting a worker reads (where
	// metrics and live streams are served, the queue polled); nil
	// discards them.
	Stdout io.Writer
	// Identity names the worker in Temporal and in the ledger's leases;
	// empty means capstan-worker@<host>/<pid>/<random>.
	Identity string
	// StopTimeout is how long running activities may take to finish once
	// the worker is asked to stop, before they are cut short and handed
	// on; zero means 30 s (cmd/worker's --stop-timeout), below zero none.
	// A Registration ignores it: it is the program's worker's option.
	StopTimeout time.Duration
}

// defaultStopTimeout is cmd/worker's --stop-timeout default.
const defaultStopTimeout = 30 * time.Second

// Refusals a caller may test for with errors.Is. Each comes wrapped in
// one sentence naming the tool or the setting.
var (
	// ErrDuplicateTool: a tool's name is one another tool of the worker
	// has (built-in, an MCP server's, or another of the program's).
	ErrDuplicateTool = errors.New("duplicate tool name")
	// ErrInvalidTool: a tool the worker cannot offer a model (nil, a name
	// the model APIs refuse or starting with mcp__, no schema, an unknown
	// class).
	ErrInvalidTool = errors.New("unusable tool")
	// ErrAlreadyRegistered: the workflow and activities are registered
	// already (Run, Start or Register ran), so no tool can be added and
	// they cannot be registered again.
	ErrAlreadyRegistered = errors.New("the worker's workflow and activities are registered already")
	// ErrCodecWithClient: CAPSTAN_CODEC_KEYS is set for a worker given a
	// Temporal client, whose payloads it could not encode.
	ErrCodecWithClient = errors.New("CAPSTAN_CODEC_KEYS is set with a given Temporal client")
	// ErrNamespaceWithoutClient: Options.Namespace names the namespace of
	// a given client, and there is none.
	ErrNamespaceWithoutClient = errors.New("Options.Namespace is set without Options.Client: a worker that dials reads TEMPORAL_NAMESPACE")
)

// refusals pairs the wiring's sentinels with this package's.
var refusals = []struct{ inner, outer error }{
	{workerapp.ErrDuplicateTool, ErrDuplicateTool},
	{workerapp.ErrBadTool, ErrInvalidTool},
	{workerapp.ErrRegistered, ErrAlreadyRegistered},
	{workerapp.ErrCodecWithClient, ErrCodecWithClient},
}

// refusal is an error of the wiring that also is one of this package's
// sentinels, its sentence unchanged.
type refusal struct {
	err, sentinel error
}

func (r *refusal) Error() string   { return r.err.Error() }
func (r *refusal) Unwrap() []error { return []error{r.err, r.sentinel} }

// public makes err, from the wiring, match this package's sentinel of it
// under errors.Is.
func public(err error) error {
	for _, p := range refusals {
		if errors.Is(err, p.inner) {
			return &refusal{err: err, sentinel: p.outer}
		}
	}
	return err
}

// overrides are the environment variables the fields of Options stand for.
func (o Options) overrides() map[string]string {
	over := map[string]string{}
	for k, v := range map[string]string{
		"CAPSTAN_TASK_QUEUE": o.TaskQueue,
		"CAPSTAN_LEDGER_DSN": o.LedgerDSN,
		"CAPSTAN_MCP_CONFIG": o.MCPConfig,
		"CAPSTAN_POLICY":     o.PolicyFile,
	} {
		if v != "" {
			over[k] = v
		}
	}
	return over
}

// lookup is LookupEnv (or os.LookupEnv) with the fields set in o in
// place of the variables they stand for.
func (o Options) lookup() func(string) (string, bool) {
	base := o.LookupEnv
	if base == nil {
		base = os.LookupEnv
	}
	over := o.overrides()
	return func(k string) (string, bool) {
		if v, ok := over[k]; ok {
			return v, true
		}
		return base(k)
	}
}

// app is o as the worker's wiring (internal/workerapp) takes it, with c
// as its client when not nil.
func (o Options) app(c client.Client) (workerapp.Options, error) {
	lookup := o.lookup()
	if c == nil && o.Namespace != "" {
		return workerapp.Options{}, ErrNamespaceWithoutClient
	}
	ns := o.Namespace
	if c != nil && ns == "" {
		ns, _ = lookup("TEMPORAL_NAMESPACE")
	}
	cfg := config.FromLookupEnv(lookup)
	live, err := config.LiveStreamFromLookupEnv(lookup)
	if err != nil {
		// As cmd/worker says it: quoting no secret of the configuration.
		return workerapp.Options{}, redact.New(cfg.Secrets()...).Error(err)
	}
	stop := o.StopTimeout
	switch {
	case stop == 0:
		stop = defaultStopTimeout
	case stop < 0:
		stop = 0
	}
	return workerapp.Options{
		Config:      cfg,
		LookupEnv:   lookup,
		LiveStream:  live,
		Logger:      o.Logger,
		Stdout:      o.Stdout,
		Identity:    o.Identity,
		StopTimeout: stop,
		Client:      c,
		Namespace:   ns,
		Tools:       o.Tools,
	}, nil
}
