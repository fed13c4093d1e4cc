package workerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/backoff"
)

// ErrNamespaceNotVisible is the error of a worker whose namespace the
// Temporal server did not serve within CAPSTAN_NAMESPACE_WAIT.
var ErrNamespaceNotVisible = errors.New("namespace not visible")

// namespacePollFirst and namespacePollMost are the first and the longest
// pause between two looks for a namespace that is not visible yet.
const (
	namespacePollFirst = 100 * time.Millisecond
	namespacePollMost  = time.Second
)

// AwaitNamespace returns once the server serves namespace ns to calls
// that name it, which a namespace created a moment before is not: the
// server remembers for about a second that it did not find it. While ns
// is not visible it says so once on stdout and in the log, and looks
// again (at most every second) until wait has passed, then fails with
// ErrNamespaceNotVisible in one sentence. Any other error of the look is
// returned as it is; ctx ending ends the wait with ctx's error. A wait of
// 0 looks once.
//
// The look is the call EnsureSearchAttributes makes next, listing ns's
// search attributes, which the server answers only for a namespace its
// namespace registry (the one polls and starts go through) knows.
func AwaitNamespace(ctx context.Context, c client.Client, ns string, wait time.Duration, stdout io.Writer, logger *slog.Logger) error {
	deadline := time.Now().Add(wait)
	pause := namespacePollFirst
	said := false
	for {
		_, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
		if err == nil || !namespaceNotFound(err, ns) {
			if err != nil {
				return fmt.Errorf("list search attributes of namespace %s: %w", ns, err)
			}
			if said {
				logger.Info("namespace visible", "namespace", ns)
			}
			return nil
		}
		if !said {
			said = true
			fmt.Fprintf(stdout, "waiting for namespace %s to be visible… (up to %s, CAPSTAN_NAMESPACE_WAIT)\n", ns, wait)
			logger.Info("waiting for namespace to be visible", "namespace", ns, "wait", wait)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: the Temporal server did not serve namespace %s within %s (CAPSTAN_NAMESPACE_WAIT); "+
				"create it (`temporal operator namespace create --namespace %s`) or set TEMPORAL_NAMESPACE to one that exists",
				ErrNamespaceNotVisible, ns, wait, ns)
		}
		if err := backoff.Sleep(ctx, min(pause, left)); err != nil {
			return fmt.Errorf("waiting for namespace %s: %w", ns, err)
		}
		pause = min(2*pause, namespacePollMost)
	}
}

// namespaceNotFound reports whether err is the server's "namespace ns is
// not found": its NamespaceNotFound, or, where the listing of search
// attributes wraps what describing the namespace answered (SQL
// visibility), that answer's words inside an Unavailable.
func namespaceNotFound(err error, ns string) bool {
	var nf *serviceerror.NamespaceNotFound
	if errors.As(err, &nf) {
		return true
	}
	var un *serviceerror.Unavailable
	return errors.As(err, &un) && strings.Contains(un.Message, "Namespace "+ns+" is not found")
}
