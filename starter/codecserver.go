package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/capstanhq/capstan/internal/codec"
)

// codecServerCommand serves the payload codec to the Temporal UI and CLI,
// so that whoever holds the token reads tasks' histories in plaintext.
func (a *app) codecServerCommand() *cobra.Command {
	var addr, origin, token string
	cmd := &cobra.Command{
		Use:   "codec-server",
		Short: "Decode encrypted payloads for the Temporal UI and CLI (CAPSTAN_CODEC_KEYS)",
		Long: "Serves POST /encode and /decode with the keys of CAPSTAN_CODEC_KEYS, to requests that present the token " +
			"(Authorization: Bearer TOKEN, or the token as the endpoint's first path segment, http://HOST:PORT/TOKEN, for the web UI). " +
			"temporal workflow show --codec-endpoint http://127.0.0.1:8089 --codec-auth 'Bearer TOKEN'; " +
			"temporal server start-dev --ui-codec-endpoint http://127.0.0.1:8089/TOKEN.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.codecServer(cmd.Context(), addr, origin, token)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", a.cfg.CodecAddr, "host:port to listen on (default $CAPSTAN_CODEC_ADDR); loopback unless you mean otherwise")
	fl.StringVar(&origin, "cors-origin", a.cfg.CodecOrigin, "the browser origin answered with CORS headers: the Temporal UI's (default $CAPSTAN_CODEC_CORS_ORIGIN, else $CAPSTAN_UI_URL)")
	fl.StringVar(&token, "codec-auth", a.cfg.CodecAuth, "the token every request presents (default $CAPSTAN_CODEC_AUTH)")
	return cmd
}

func (a *app) codecServer(ctx context.Context, addr, origin, token string) error {
	if err := a.cfg.CheckCodecKeys(); err != nil {
		return err
	}
	if len(a.cfg.CodecKeys) == 0 {
		return errors.New("CAPSTAN_CODEC_KEYS is not set: without the keys the pool encrypts with there is nothing to decode")
	}
	if token == "" {
		return usagef("a token is required: set CAPSTAN_CODEC_AUTH or pass --codec-auth (whoever presents it reads every task)")
	}
	keys, err := codec.New(a.cfg.CodecKeys)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("codec server: cannot listen on %s (--addr, CAPSTAN_CODEC_ADDR): %w", addr, err)
	}
	srv := &http.Server{Handler: codec.Handler(keys, token, origin), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stdout, "codec server: http://%s (key %s encrypts; CORS for %s)\n", ln.Addr(), keys.CurrentID(), origin)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
