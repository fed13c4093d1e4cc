package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/workflows"
)

// undefinedAttribute matches the server's refusal of a start that sets a
// search attribute the namespace does not define: the SQL visibility
// stores' wording, then Elasticsearch's.
var undefinedAttribute = regexp.MustCompile(`no mapping defined for search attribute (\w+)|search attribute (\w+) is not defined`)

// missingSearchAttribute reports the name of the search attribute a start
// was refused for because its namespace does not define it. Workers
// register capstan's attributes when they start (internal/workerapp), so
// this is a starter newer than the pool's workers, or no worker started
// yet on a new namespace.
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
// attributes use.
var attributeTypes = map[enumspb.IndexedValueType]string{
	enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
	enumspb.INDEXED_VALUE_TYPE_BOOL:    "Bool",
	enumspb.INDEXED_VALUE_TYPE_INT:     "Int",
	enumspb.INDEXED_VALUE_TYPE_TEXT:    "Text",
}

// undefinedAttributes is the error of a start refused because namespace ns
// does not define the search attribute named: it lists every one of
// capstan's attributes ns lacks (the server names only the first it
// meets) and the one command that defines them all. When ns's attributes
// cannot be read, it names the one the server did.
func undefinedAttributes(ctx context.Context, c client.Client, ns, named string) error {
	missing := []string{named}
	if list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns}); err == nil {
		missing = missing[:0]
		for _, key := range workflows.SearchAttributes {
			if _, ok := list.GetCustomAttributes()[key.GetName()]; !ok {
				missing = append(missing, key.GetName())
			}
		}
		if len(missing) == 0 { // defined since the refusal: a worker started
			missing = []string{named}
		}
	}
	return fmt.Errorf("namespace %s does not define the search attribute(s) %s, which every capstan task carries; "+
		"start a worker of this version first (it registers them), or define them: %s",
		ns, strings.Join(missing, ", "), createAttributesCommand(ns, missing))
}

// createAttributesCommand is the temporal CLI commands that define the
// named ones of capstan's search attributes in ns, joined by &&: one per
// attribute, as the CLI (v1.5) given several names defines only the first.
func createAttributesCommand(ns string, names []string) string {
	cmds := make([]string, 0, len(names))
	for _, name := range names {
		typ := "Keyword"
		for _, key := range workflows.SearchAttributes {
			if t, ok := attributeTypes[key.GetValueType()]; ok && key.GetName() == name {
				typ = t
			}
		}
		cmds = append(cmds, fmt.Sprintf("temporal operator search-attribute create --namespace %s --name %s --type %s", ns, name, typ))
	}
	return strings.Join(cmds, " && ")
}
