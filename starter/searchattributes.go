package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

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
// attributes use; TestEveryAttributeHasACLIType keeps it complete.
var attributeTypes = map[enumspb.IndexedValueType]string{
	enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
	enumspb.INDEXED_VALUE_TYPE_BOOL:    "Bool",
	enumspb.INDEXED_VALUE_TYPE_INT:     "Int",
	enumspb.INDEXED_VALUE_TYPE_TEXT:    "Text",
}

// undefinedAttributes is the error of a start refused because namespace ns
// does not define the search attribute named: it lists every one of
// capstan's attributes ns lacks (the server names only the first it
// meets) and the commands that define them. When ns's attributes cannot
// be read, it names the one the server did.
func undefinedAttributes(ctx context.Context, c client.Client, ns, named string) error {
	var missing []temporal.SearchAttributeKey
	if list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns}); err == nil {
		missing = workflows.MissingSearchAttributes(list.GetCustomAttributes())
	}
	if len(missing) == 0 { // unreadable, or defined since the refusal
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
