// Package reconcilers asks external systems what became of an operation
// whose outcome is unknown (docs/design.md §5.5): the request may have reached the
// system and nobody heard the answer.
//
// One file per system says how its effect is recognised:
//
//	pull request  list state=all, head=<owner>:<head>, base=<base>; the
//	              capstan-op marker in the body, then the head SHA the tool
//	              recorded before sending (see GitHub.PullRequest)
//	branch        get the ref; its SHA against the SHA of "from"
//	file write    read the file on the branch; its blob SHA against the git
//	              blob SHA of the content that was to be written
//	comment       list the comments since the claim (minus
//	              ClockMargin); the marker in the body
//	Slack message conversations.history from the claim (minus ClockMargin)
//	              with all metadata; the operation id in the metadata
//
// Each asks once and reports what it saw as an Observation: Found (with the
// effect's id, in the form the tool itself records), NotSeen, or Ambiguous
// (several candidates, or something that may or may not be ours). An error
// means the question could not be asked — a rate limit, a 5xx, a dropped
// connection — and says nothing about the effect: it is never NotSeen.
// Deciding between "not yet" and "absent" (the consistency window), and
// asking again, is the caller's job; a reconciler never performs the effect
// itself.
package reconcilers
