package config

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// DialTemporal connects to the Temporal server named by the SDK's envconfig
// (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE, the config file
// for TLS and API keys). It fails within timeout with a sentence naming the
// address when the server cannot be reached. metrics, when not nil, receives
// the SDK's own metrics (the worker's Prometheus endpoint). codec, when not
// nil, encodes every payload the client and its workers write, and the
// messages and stack traces of failures (CAPSTAN_CODEC_KEYS,
// internal/codec); nil leaves them plain. interceptors are added to the
// client's (the starter's tracing: internal/trace).
func DialTemporal(ctx context.Context, identity string, logger log.Logger, metrics client.MetricsHandler, codec converter.PayloadCodec, timeout time.Duration,
	interceptors ...interceptor.ClientInterceptor) (client.Client, client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return nil, opts, fmt.Errorf("read Temporal client configuration: %w", err)
	}
	if opts.HostPort == "" {
		opts.HostPort = client.DefaultHostPort
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	if identity != "" {
		opts.Identity = identity
	}
	opts.Logger = logger
	if metrics != nil {
		opts.MetricsHandler = metrics
	}
	if codec != nil {
		opts.DataConverter = converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec)
		opts.FailureConverter = temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
			DataConverter: opts.DataConverter, EncodeCommonAttributes: true})
	}
	opts.Interceptors = append(opts.Interceptors, interceptors...)
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		if errors.Is(dctx.Err(), context.DeadlineExceeded) {
			return nil, opts, fmt.Errorf("cannot reach the Temporal server at %s (namespace %s) within %s; is it running? (set TEMPORAL_ADDRESS)", opts.HostPort, opts.Namespace, timeout)
		}
		return nil, opts, fmt.Errorf("cannot connect to the Temporal server at %s (namespace %s): %w", opts.HostPort, opts.Namespace, err)
	}
	return c, opts, nil
}
