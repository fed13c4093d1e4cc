// Package contract is what the AgentTask workflow and capstan's activities
// agree on: the activities' names, one input and one result struct per
// activity, the details their errors and heartbeats carry, and the closed set
// of application-error types with the helpers that read them. The workflow
// and the starter import it instead of package activities, so neither links
// the clients the activities call (slack-go, go-github, gobreaker, the model
// providers' SDKs); it imports only the standard library, the Temporal SDK
// and capstan's leaf packages (the root vocabulary, internal/model).
//
// Everything here is in recorded histories: a JSON field name, an activity
// name or an error type's string is never changed (docs/design.md,
// "Replay"). Package activities names these types as its own (aliases in
// internal/activities/types.go).
package contract
