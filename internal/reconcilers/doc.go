// Package reconcilers finds out what became of an operation whose outcome
// is unknown (docs/design.md §5.4, §5.5): the request may have reached the
// external system and nobody heard the answer.
//
// It knows no system and no tool. What an operation leaves behind, and how
// to look for it, is said by whatever made it, beside the parser of its
// arguments: a tool that implements tools.Finder (the GitHub tools in
// internal/tools/github), or a delivery (the Slack message in
// internal/tools/slackpost). A Set gathers them by the kind the ledger
// records for their operations; a tool that is a tools.Finder is
// reconciled once it is in the worker's tool registry, with nothing to add
// here.
//
// What is here is the reconciliation itself (Set.Reconcile): the
// consistency window and the verdict rules.
//
//   - Each question asks the external system once (tools.Effect.Find).
//     An error means the question could not be asked — a rate limit, a
//     5xx, a dropped connection — and says nothing about the effect.
//   - Found is final: the operation took effect (SUCCEEDED).
//   - Ambiguous is final: several candidates, or something that may or may
//     not be the operation's; a person decides (NEEDS_HUMAN).
//   - Not seen, or not asked, is asked again after a backoff while the
//     window lasts: the system may still be catching up. Not seen by a
//     question asked at the end of the window is absent (ABSENT): the
//     operation may be executed again. A question that still cannot be
//     asked at the end of the window leaves nobody able to tell
//     (NEEDS_HUMAN).
//   - No lookup for the operation's kind, or none that can be formed from
//     what was sent, is NEEDS_HUMAN at once; a lookup whose client this
//     worker lacks is a misconfigured worker (tools.ErrNotConfigured).
//
// A reconciler never performs the effect itself. Taking the operation in
// the ledger, recording the verdict, heartbeats and metrics are the Reconcile
// activity's; asking a person and executing an absent operation again are
// the workflow's.
package reconcilers
