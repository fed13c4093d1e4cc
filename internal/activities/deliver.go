package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// definiteSlackRefusals are chat.postMessage errors after which Slack has
// certainly posted nothing. Any other ok=false answer is treated as unknown.
var definiteSlackRefusals = map[string]bool{
	"channel_not_found": true, "not_in_channel": true, "is_archived": true, "msg_too_long": true,
	"no_text": true, "too_many_attachments": true, "invalid_blocks": true, "invalid_metadata_format": true,
	"invalid_metadata_schema": true, "metadata_too_large": true, "restricted_action": true,
	"not_authed": true, "invalid_auth": true, "account_inactive": true, "token_revoked": true,
	"token_expired": true, "no_permission": true, "missing_scope": true, "ekm_access_denied": true,
	"channel_is_archived": true, "cannot_reply_to_message": true, "duplicate_channel_not_found": true,
}

// Deliver posts the final answer, or an approval notice, to a Slack
// channel as an unsafe operation, its text escaped for Slack (&, <, >:
// no mention, no <!channel>, no disguised link) and a notice's as plain
// text, which nothing in it can format (slackpost.TextOptions):
// claimed in the ledger first, with the operation id in the message metadata
// (slackpost.Metadata) so a reconciler can tell whether an unanswered post
// landed (slackpost.Messages). It heartbeats on a ticker while the post is
// in flight. A post whose outcome is unknown is recorded UNKNOWN and never
// re-sent blindly; a rate-limited one is ABSENT and retried after the wait
// Slack asked for. A post goes through the slack/post breaker, a comment
// through github/write: while it is open nothing is sent and the activity
// fails with contract.ErrTypeBreakerOpen.
func (a *Activities) Deliver(ctx context.Context, in contract.DeliverInput) (contract.DeliverResult, error) {
	ctx = scoped(logids.With(ctx, logids.IDs{TaskID: in.TaskID, OperationID: in.OperationID}), in.Scope, in.TaskID)
	res, err := a.deliver(ctx, in)
	err = a.retryable(ctx, err)
	a.observeDeliver(ctx, in, res, err)
	return res, err
}

func (a *Activities) deliver(ctx context.Context, in contract.DeliverInput) (contract.DeliverResult, error) {
	res := contract.DeliverResult{OperationID: in.OperationID}
	if in.Comment != nil {
		return a.deliverComment(ctx, in)
	}
	if a.Slack == nil {
		return res, temporal.NewNonRetryableApplicationError(
			"this worker has no Slack client configured (set SLACK_BOT_TOKEN)", contract.ErrTypeWorkerConfig, nil)
	}
	rec, permit, done, err := a.begin(ctx, ledger.Operation{
		ID: in.OperationID, Tenant: in.Tenant, TaskID: in.TaskID, Kind: slackpost.Kind,
		BusinessKey: "slack:post:" + in.Channel,
		RequestHash: RequestHash(slackpost.Kind, []byte(in.Channel+"\x00"+in.Text)),
	}, nil, breaker.SlackPost, nil)
	if err != nil {
		return res, err
	}
	if done {
		res.ExternalID, res.Replayed = rec.ExternalID, true
		return res, nil
	}
	fence := rec.Fence
	channel, ts, postErr := a.postToSlack(ctx, in, fence, permit)

	// Every write from here on records what the post did: the activity's
	// cancellation must not break it, nor a short ledger outage (record).
	if postErr == nil {
		res.ExternalID = channel + "/" + ts
		if err := a.record(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: capstan.OutcomeSucceeded, ExternalID: res.ExternalID}); err != nil {
			return res, recordFailed(err, "record delivery %s", in.OperationID)
		}
		return res, nil
	}

	var refused slack.SlackErrorResponse
	var limited *slack.RateLimitedError
	var status slack.StatusCodeError
	switch {
	case errors.As(postErr, &refused) && definiteSlackRefusals[refused.Err]:
		// Slack answered ok=false with an error that means it posted
		// nothing. Others (internal_error, fatal_error, …) may have posted.
		if err := a.record(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: capstan.OutcomeFailed, Error: postErr.Error()}); err != nil {
			return res, recordFailed(err, "record refused delivery %s", in.OperationID)
		}
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("Slack refused the message to %s: %s", in.Channel, refused.Err), contract.ErrTypeDeliveryFailed, postErr)
	case errors.As(postErr, &limited), errors.As(postErr, &status) && status.Code == 429,
		tool.Classify(postErr) == tool.VerdictNotSent:
		// Rate limited or never sent: nothing was posted, so trying again
		// with the same operation id is safe.
		if err := a.record(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: capstan.OutcomeAbsent, Error: postErr.Error()}); err != nil {
			return res, recordFailed(err, "record unsent delivery %s", in.OperationID)
		}
		cause := postErr
		if limited != nil {
			// Slack's ratelimited answer names its wait; it travels as the
			// same data as a GitHub rate limit's.
			cause = &tool.RetryAfterError{Wait: limited.RetryAfter, Err: postErr}
		}
		return res, a.notSent(ctx, contract.ErrTypeDeliveryNotSent, fmt.Sprintf("Slack did not take the message to %s: %v", in.Channel, postErr), cause)
	default:
		if err := a.record(ctx, ledger.Completion{ID: in.OperationID, Fence: fence,
			State: capstan.OutcomeUnknown, Error: postErr.Error()}); err != nil {
			return res, recordFailed(err, "record delivery %s as unknown", in.OperationID)
		}
		return res, unknownOperation(in.OperationID, capstan.OutcomeUnknown, postErr)
	}
}

// postToSlack sends the post of delivery in, claimed under fence,
// heartbeating and renewing the claim's lease while it is in flight, and
// tells the breaker what Slack's answer showed.
func (a *Activities) postToSlack(ctx context.Context, in contract.DeliverInput, fence int64, permit *breaker.Permit) (channel, ts string, err error) {
	stop := a.heartbeat(ctx, a.heartbeatInterval(ctx),
		func() any { return OperationHeartbeat{OperationID: in.OperationID, Step: stepCalling} },
		a.renewLease(ctx, in.OperationID, fence))
	defer stop()
	// The text is escaped for Slack, and an approval notice, which quotes
	// a call's arguments, is plain text (slackpost.TextOptions).
	opts := append(slackpost.TextOptions(in.Text, contract.IsApprovalNotice(in.OperationID)),
		slack.MsgOptionMetadata(slackpost.Metadata(in.OperationID, in.TaskID)))
	channel, ts, err = a.Slack.PostMessageContext(ctx, in.Channel, opts...)
	permit.Done(slackHealth(err))
	return channel, ts, err
}

// deliverComment posts the final answer as a comment on a GitHub issue or
// pull request. It is the github_comment tool run as an operation, exactly
// as ExecuteTool runs it: claimed, marked with the operation id, and
// recorded UNKNOWN when GitHub's answer is lost, for the comment tool's lookup
// to find by its marker. A comment GitHub refused is a failed delivery.
func (a *Activities) deliverComment(ctx context.Context, in contract.DeliverInput) (contract.DeliverResult, error) {
	res := contract.DeliverResult{OperationID: in.OperationID}
	ref, err := a.Ledger.PutItem(ctx, contract.CommentArguments(*in.Comment, in.Text))
	if err != nil {
		return res, fmt.Errorf("store the comment of delivery %s: %w", in.OperationID, err)
	}
	out, err := a.executeTool(ctx, contract.ExecuteToolInput{Tenant: in.Tenant, TaskID: in.TaskID, OperationID: in.OperationID,
		Tool: githubtools.NameComment, Arguments: ref})
	if err != nil {
		return res, err
	}
	if out.State != capstan.OutcomeSucceeded {
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("GitHub refused the comment on %s#%d: %s", in.Comment.Repo, in.Comment.Number, out.Preview), contract.ErrTypeDeliveryFailed, nil)
	}
	res.ExternalID, res.Replayed = out.ExternalID, out.Replayed
	return res, nil
}
