package activities_test

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/contract"
)

// hostileAnswer is text a prompt-injected model could write: a ping of
// the whole channel, a mention, a link shown as something else, an
// entity, and a code block with what a file could hold.
const hostileAnswer = "<!channel> urgent: <http://evil.example/login|Approve here> & ask <@U0ADMIN>\n" +
	"```\n```\n*Approved by security* &amp;\n```"

// The text of every Slack message — a final answer and an approval notice
// alike — reaches Slack with &, < and > escaped: Slack shows it as
// written, and none of it is a mention, <!channel> or a disguised link.
func TestDeliverEscapesSlackText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	want := "&lt;!channel&gt; urgent: &lt;http://evil.example/login|Approve here&gt; &amp; ask &lt;@U0ADMIN&gt;\n" +
		"```\n```\n*Approved by security* &amp;amp;\n```"
	for _, opID := range []string{
		"default:T:deliver:slack:#c",
		"default:T:~3c4e2731fc30:github_put_file:file:acme/app:x:README.md:approval-notice:1",
	} {
		in := contract.DeliverInput{Tenant: "default", TaskID: "T", OperationID: opID, Channel: "#c", Text: hostileAnswer}
		if _, err := f.env.ExecuteActivity(f.acts.Deliver, in); err != nil {
			t.Fatalf("deliver %s: %v", opID, err)
		}
	}
	msgs := f.sb.Slack.Messages("#c")
	if len(msgs) != 2 {
		t.Fatalf("Slack has %d messages in #c, want 2", len(msgs))
	}
	for i, m := range msgs {
		if m.Text != want || strings.ContainsAny(m.Text, "<>") {
			t.Errorf("message %d reached Slack as %q, want it escaped: %q", i, m.Text, want)
		}
	}
}
