package workerapp

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger/ledgerdsn"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/redact"
)

// checked is what the static checks of a worker's configuration learnt:
// everything New needs of it before it opens, starts or registers
// anything.
type checked struct {
	keys *codec.Keys
	mcp  *mcp.Config // nil without CAPSTAN_MCP_CONFIG
	// floor is the worker's own CAPSTAN_POLICY; nil for none.
	floor *policy.Policy
	// redactor masks every secret the worker holds (internal/redact) in
	// its log lines, its activities' failures and results, its ledger's
	// error column and its own errors.
	redactor *redact.Redactor
}

// checkConfig runs every check of cfg that needs nothing outside this
// process: the settings and credentials (ValidateWorker, the GitHub App's
// key among them), the codec keys, the ledger DSN's form, the breakers'
// thresholds, the policy file and the MCP file (read and ${VAR} expanded
// through lookupEnv, no server started). New runs it before it listens, registers or starts
// anything, so a bad configuration starts nothing. The redactor is built
// even when a check fails, so that the sentence refusing a secret does not
// quote it.
func checkConfig(cfg config.Config, lookupEnv func(string) (string, bool)) (c checked, err error) {
	secrets := cfg.Secrets()
	defer func() { c.redactor = redact.New(secrets...) }()
	if err := cfg.ValidateWorker(); err != nil {
		return c, err
	}
	if c.keys, err = codec.New(cfg.CodecKeys); err != nil {
		return c, err
	}
	if err := ledgerdsn.Check(cfg.LedgerDSN); err != nil {
		return c, err
	}
	if !cfg.BreakersOff {
		if err := cfg.Breakers.Validate(); err != nil {
			return c, fmt.Errorf("CAPSTAN_BREAKER_*: %w", err)
		}
	}
	if c.floor, err = checkPolicy(cfg.PolicyFile); err != nil {
		return c, err
	}
	if cfg.MCPConfig != "" {
		var held []string
		c.mcp, held, err = LoadMCP(cfg.MCPConfig, lookupEnv)
		secrets = append(secrets, held...)
		if err != nil {
			return c, fmt.Errorf("CAPSTAN_MCP_CONFIG: %w", err)
		}
	}
	return c, nil
}

// LoadMCP reads and checks the MCP file at path (mcp.Load), expanding
// ${VAR} through lookup, and returns with it the secrets it holds, for
// internal/redact: every value ${VAR} expanded to, and what the file
// writes as it is in an env or header value, or in a url's user
// information or query. The secrets are returned even when the file is
// refused.
func LoadMCP(path string, lookup func(string) (string, bool)) (*mcp.Config, []string, error) {
	var secrets []string
	file, err := mcp.Load(path, func(name string) (string, bool) {
		v, ok := lookup(name)
		if ok {
			secrets = append(secrets, v)
		}
		return v, ok
	})
	if err != nil {
		return nil, secrets, err
	}
	for _, name := range file.Names() {
		s := file.Servers[name]
		secrets = append(secrets, config.URLSecrets(s.URL)...)
		for _, v := range s.Headers {
			secrets = append(secrets, v)
			secrets = append(secrets, strings.Fields(v)...) // the token of "Bearer <token>"
		}
		for _, v := range s.Env {
			secrets = append(secrets, v)
		}
	}
	return file, secrets, nil
}
