// Package reconcilers asks external systems what really happened to an
// operation whose outcome is UNKNOWN (docs/design.md §5.5): a pull request by head and
// base branch and the capstan-op marker in its body, a branch by its ref, a
// comment or a Slack message by the operation id embedded in it.
//
// A reconciler answers found, absent, not_yet or indeterminate; it never
// performs the effect itself. The reconcilers land in a later change; until
// then an UNKNOWN operation stops its task with the failure code
// operation_unknown rather than being retried blindly.
package reconcilers
