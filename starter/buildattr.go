package main

import (
	"context"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// The server's system search attributes of Worker Versioning, which it
// rewrites as each workflow task completes. List results carry them, while
// the server's visibility leaves WorkflowExecutionInfo.VersioningInfo empty
// there: they are how a list tells a run's build without describing it.
const (
	// attrDeploymentVersion is the run's Worker Deployment Version as the
	// server spells it: "DEPLOYMENT:BUILD", or "DEPLOYMENT.BUILD" on older
	// servers. Absent while the run is unversioned.
	attrDeploymentVersion = "TemporalWorkerDeploymentVersion"
	// attrVersioningBehavior is "Pinned" or "AutoUpgrade".
	attrVersioningBehavior = "TemporalWorkflowVersioningBehavior"
)

// serverUnversioned is how servers of Worker Versioning's 0.31 API spell
// "no version".
const serverUnversioned = "__unversioned__"

// buildOfVersion is the build label of a version as the server spells it
// in attrDeploymentVersion — "DEPLOYMENT/BUILD", as taskBuild prints it,
// or unversioned — and false when it is not a version. The server refuses
// both ':' and '.' in a deployment name (and capstan refuses '.', see
// internal/config), so the first of either ends the name in both
// spellings; the build id may hold either.
func buildOfVersion(v string) (string, bool) {
	if v == "" || v == serverUnversioned {
		return unversioned, true
	}
	i := strings.IndexAny(v, ":.")
	if i <= 0 || i == len(v)-1 {
		return "", false
	}
	return v[:i] + "/" + v[i+1:], true
}

// keywordAttr is the string value of the Keyword search attribute name,
// and whether sa holds it.
func keywordAttr(sa map[string]*commonpb.Payload, name string) (string, bool) {
	p, ok := sa[name]
	if !ok {
		return "", false
	}
	var s string
	if converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return "", false
	}
	return s, true
}

// listedBuildLabel is the build `starter list` shows for a listed run, from
// its search attributes alone (listedBuild's label, whether or not it
// tells the run's pinning).
func listedBuildLabel(sa map[string]*commonpb.Payload) string {
	build, _, _ := listedBuild(sa, true)
	return build
}

// listedBuild is a listed run's build and whether it is pinned there, as
// taskBuild says from a describe, from the list entry's search attributes
// sa; known is false when they do not tell, and only a describe does. The
// build is always a label to show: the version's, unversioned without the
// attribute, or the attribute as the server wrote it when that is not a
// version. An entry without attrDeploymentVersion is an unversioned run
// when serverKeepsVersions (the server writes the attribute for every
// versioned run), and tells nothing otherwise (an older server, which
// never writes it).
func listedBuild(sa map[string]*commonpb.Payload, serverKeepsVersions bool) (build string, pinned, known bool) {
	v, ok := keywordAttr(sa, attrDeploymentVersion)
	if !ok {
		return unversioned, false, serverKeepsVersions
	}
	build, ok = buildOfVersion(v)
	switch {
	case !ok:
		return v, false, false
	case build == unversioned:
		return unversioned, false, true
	}
	b, _ := keywordAttr(sa, attrVersioningBehavior)
	behavior, err := enumspb.VersioningBehaviorFromString(b)
	if err != nil || behavior == enumspb.VERSIONING_BEHAVIOR_UNSPECIFIED {
		return build, false, false
	}
	return build, behavior == enumspb.VERSIONING_BEHAVIOR_PINNED, true
}

// keepsVersions reports whether namespace ns has the system search
// attribute attrDeploymentVersion, that is whether its server writes it for
// every versioned run. Unreadable attributes count as no: each run is then
// described, which is slow but right.
func keepsVersions(ctx context.Context, c client.Client, ns string) bool {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return false
	}
	_, ok := list.GetSystemAttributes()[attrDeploymentVersion]
	return ok
}
