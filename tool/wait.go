package tool

import "context"

// waitNoticeKey carries the WaitNotice of a context.
type waitNoticeKey struct{}

// WithWaitNotice returns a context whose lookups tell notice when they wait
// on the external system of their own accord — a rate limit's Retry-After,
// say — so the caller can say so (a heartbeat, a log line) while they wait
// instead of looking hung. notice must be safe for concurrent use.
func WithWaitNotice(ctx context.Context, notice func(why string)) context.Context {
	return context.WithValue(ctx, waitNoticeKey{}, notice)
}

// NoticeWait tells ctx's WaitNotice, if any, why the caller is about to wait.
func NoticeWait(ctx context.Context, why string) {
	if notice, ok := ctx.Value(waitNoticeKey{}).(func(string)); ok && notice != nil {
		notice(why)
	}
}
