package activities_test

import (
	"testing"

	"github.com/capstanhq/capstan/internal/contract"
)

// An approval notice quotes a call's arguments — a file's content among
// them — so it is posted with mrkdwn off: nothing in it can close a code
// block or format the notice (*Approved by security* shows its asterisks);
// a final answer keeps the model's formatting. Both are escaped
// (TestDeliverEscapesSlackText).
func TestApprovalNoticeReachesSlackAsPlainText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	notice := "default:T:~3c4e2731fc30:github_put_file:file:acme/app:x:README.md" + contract.ApprovalNoticeMark + "1"
	for _, in := range []contract.DeliverInput{
		{Tenant: "default", TaskID: "T", OperationID: notice, Channel: "#approvals", Text: hostileAnswer},
		{Tenant: "default", TaskID: "T", OperationID: "default:T:deliver:slack:#c", Channel: "#c", Text: hostileAnswer},
	} {
		if _, err := f.env.ExecuteActivity(f.acts.Deliver, in); err != nil {
			t.Fatalf("deliver %s: %v", in.OperationID, err)
		}
	}
	notices, answers := f.sb.Slack.Messages("#approvals"), f.sb.Slack.Messages("#c")
	if len(notices) != 1 || !notices[0].Plain {
		t.Errorf("the approval notice reached Slack as %+v, want one message posted with mrkdwn=false", notices)
	}
	if len(answers) != 1 || answers[0].Plain {
		t.Errorf("the final answer reached Slack as %+v, want one mrkdwn message", answers)
	}
}
