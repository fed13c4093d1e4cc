package workerapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/workflows"
)

// EnsureSearchAttributes registers the attributes AgentTask sets that the
// namespace lacks, so a task never fails on an unknown attribute. Workers of
// a pool start together: an attribute a peer registered first is success.
// Every worker runs it at start; a test server shared by tests that start
// tasks before any worker runs it there too. It registers no Bool: the
// Bools tasks set before changeSearchFlags (workflows.LegacySearchAttributes)
// are left as the namespace has them, so a fresh namespace keeps all three
// Bools SQL visibility allows for its own (docs/design.md §9.2).
func EnsureSearchAttributes(ctx context.Context, c client.Client, ns string, logger *slog.Logger) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", ns, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, key := range workflows.MissingSearchAttributes(list.GetCustomAttributes()) {
		missing[key.GetName()] = key.GetValueType()
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	})
	var exists *serviceerror.AlreadyExists
	if errors.As(err, &exists) || (err != nil && registered(ctx, c, ns, missing)) {
		// A peer worker registered them first (the server reports the
		// race as AlreadyExists or as a retryable error): that is success.
		logger.Info("search attributes registered by a peer", "names", sortedKeys(missing))
		return nil
	}
	if err != nil {
		return fmt.Errorf("register search attributes %v in namespace %s (register them with `temporal operator search-attribute create`): %w", sortedKeys(missing), ns, err)
	}
	logger.Info("registered search attributes", "names", sortedKeys(missing))
	return nil
}

// registered reports whether the namespace now has every attribute in want.
func registered(ctx context.Context, c client.Client, ns string, want map[string]enumspb.IndexedValueType) bool {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return false
	}
	for name := range want {
		if _, ok := list.GetCustomAttributes()[name]; !ok {
			return false
		}
	}
	return true
}
