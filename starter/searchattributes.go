package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/workflows"
)

// undefinedAttribute matches the server's refusal of a start that sets a
// search attribute the namespace does not define: the SQL visibility
// stores' wording, then Elasticsearch's.
var undefinedAttribute = regexp.MustCompile(`no mapping defined for search attribute (\w+)|search attribute (\w+) is not defined`)

// missingSearchAttribute reports the name of the search attribute a start
// was refused for because the server does not know it in its namespace.
// Workers register capstan's attributes when they start
// (internal/workerapp), so this is a starter newer than the pool's
// workers, no worker started yet on a new namespace, or a start in the
// second or two after a worker registered them, before the server serves
// them (startWhileAttributesPropagate tells these apart).
func missingSearchAttribute(err error) (string, bool) {
	var invalid *serviceerror.InvalidArgument
	if !errors.As(err, &invalid) {
		return "", false
	}
	m := undefinedAttribute.FindStringSubmatch(invalid.Message)
	if m == nil {
		return "", false
	}
	if m[1] != "" {
		return m[1], true
	}
	return m[2], true
}

// attributeTypes are the CLI's names of the value types capstan's
// attributes use; TestEveryAttributeHasACLIType keeps it complete.
var attributeTypes = map[enumspb.IndexedValueType]string{
	enumspb.INDEXED_VALUE_TYPE_KEYWORD:      "Keyword",
	enumspb.INDEXED_VALUE_TYPE_BOOL:         "Bool",
	enumspb.INDEXED_VALUE_TYPE_INT:          "Int",
	enumspb.INDEXED_VALUE_TYPE_TEXT:         "Text",
	enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}

// attributePropagationWait bounds how long `starter run` retries a start
// the server refuses for a search attribute its namespace has registered:
// the server serves a newly registered attribute to starts only once its
// namespace cache has caught up, a second or two later.
const attributePropagationWait = 5 * time.Second

// attributeRetryFirst is the first pause between two such starts; each
// pause doubles.
const attributeRetryFirst = 100 * time.Millisecond

// errAttributesNotServed is the error of a start the server still refused,
// past attributePropagationWait, for an attribute its namespace has
// registered.
var errAttributesNotServed = errors.New("the server does not serve the namespace's search attributes yet")

// startWhileAttributesPropagate calls start until the server stops
// refusing it for an undefined search attribute, and returns its answer.
// After each such refusal it reads which of capstan's attributes
// namespace ns has registered: when ns lacks some, that is the error at
// once (undefinedAttributes), nothing started; when ns has them all (the
// refusal came while the server catches up with their registration) or
// they cannot be read, start is called again after a pause, until wait
// has passed; then the error says accurately what the server refused.
// start must be safe to call again after a refusal: `starter run` starts
// under a fixed workflow id whose id policies return the run a previous
// call made rather than start a second one.
func startWhileAttributesPropagate(ctx context.Context, c client.Client, ns string, wait time.Duration, start func() (client.WorkflowRun, error)) (client.WorkflowRun, error) {
	deadline := time.Now().Add(wait)
	pause := attributeRetryFirst
	for {
		run, err := start()
		named, ok := missingSearchAttribute(err)
		if !ok {
			return run, err
		}
		missing, read := lackedAttributes(ctx, c, ns)
		if read && len(missing) > 0 {
			return nil, undefinedAttributes(ns, named, missing)
		}
		left := time.Until(deadline)
		if left <= 0 {
			if !read {
				return nil, undefinedAttributes(ns, named, nil)
			}
			return nil, fmt.Errorf("%w: namespace %s defines the search attribute %s, but the server still refused a start that sets it after %s; "+
				"it serves a newly registered attribute once its namespace cache refreshes, so run the command again in a moment",
				errAttributesNotServed, ns, named, wait)
		}
		if err := backoff.Sleep(ctx, min(pause, left)); err != nil {
			return nil, err
		}
		pause *= 2
	}
}

// lackedAttributes returns capstan's search attributes namespace ns does
// not define; read is false when ns's attributes cannot be listed.
func lackedAttributes(ctx context.Context, c client.Client, ns string) (missing []temporal.SearchAttributeKey, read bool) {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return nil, false
	}
	return workflows.MissingSearchAttributes(list.GetCustomAttributes()), true
}

// undefinedAttributes is the error of a start refused because namespace ns
// does not define the search attribute named: it lists missing, every one
// of capstan's attributes ns lacks (the server names only the first it
// meets), and the commands that define them. With missing empty (ns's
// attributes could not be read) it names the one the server did.
func undefinedAttributes(ns, named string, missing []temporal.SearchAttributeKey) error {
	if len(missing) == 0 {
		missing = slices.DeleteFunc(slices.Clone(workflows.SearchAttributes), func(k temporal.SearchAttributeKey) bool { return k.GetName() != named })
	}
	if len(missing) == 0 { // not one of capstan's: nothing to print a command for
		return fmt.Errorf("namespace %s does not define the search attribute %s", ns, named)
	}
	names := make([]string, len(missing))
	cmds := make([]string, len(missing))
	for i, key := range missing {
		// One command per attribute: the CLI (v1.5) given several names
		// defines only the first.
		names[i] = key.GetName()
		cmds[i] = fmt.Sprintf("temporal operator search-attribute create --namespace %s --name %s --type %s", ns, key.GetName(), attributeTypes[key.GetValueType()])
	}
	return fmt.Errorf("namespace %s does not define the search attribute(s) %s, which every capstan task carries; "+
		"start a worker of this version first (it registers them), or define them: %s",
		ns, strings.Join(names, ", "), strings.Join(cmds, " && "))
}
