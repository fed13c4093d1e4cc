package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// fakeHistories serves describes and histories of open tasks, each read
// taking a random few milliseconds, and records how many were in flight at
// most. An even task's history holds the all-changes-v13 marker; an odd
// one's holds none.
type fakeHistories struct {
	client.Client
	mu                    sync.Mutex
	inFlight, maxInFlight int
	reads                 []string
}

func (f *fakeHistories) enter(wid string) {
	f.mu.Lock()
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.reads = append(f.reads, wid)
	f.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
}

func (f *fakeHistories) leave() {
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
}

func (f *fakeHistories) DescribeWorkflow(_ context.Context, wid, _ string) (*client.WorkflowExecutionDescription, error) {
	f.enter("describe " + wid)
	defer f.leave()
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{VersioningInfo: &workflowpb.WorkflowExecutionVersioningInfo{
			Behavior:          enumspb.VERSIONING_BEHAVIOR_PINNED,
			DeploymentVersion: &deploymentpb.WorkerDeploymentVersion{DeploymentName: "capstan", BuildId: "v1"},
		}},
	}}, nil
}

func (f *fakeHistories) GetWorkflowHistory(_ context.Context, wid, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.enter(wid)
	var n int
	_, _ = fmt.Sscanf(wid, "task-t%d", &n)
	it := &fakeIterator{leave: f.leave}
	if n%2 == 0 {
		id, _ := converter.GetDefaultDataConverter().ToPayload("all-changes-v13")
		it.events = []*historypb.HistoryEvent{{Attributes: &historypb.HistoryEvent_MarkerRecordedEventAttributes{
			MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{MarkerName: versionMarkerName,
				Details: map[string]*commonpb.Payloads{versionMarkerChangeID: {Payloads: []*commonpb.Payload{id}}}}}}}
	}
	return it
}

type fakeIterator struct {
	events []*historypb.HistoryEvent
	leave  func()
	left   bool
}

func (it *fakeIterator) HasNext() bool {
	if len(it.events) == 0 && !it.left {
		it.left = true
		it.leave()
	}
	return len(it.events) > 0
}

func (it *fakeIterator) Next() (*historypb.HistoryEvent, error) {
	ev := it.events[0]
	it.events = it.events[1:]
	return ev, nil
}

// The histories of unpinned tasks are read at most historiesInFlight at a
// time, and more than one at a time; a pinned task's is never read, a task
// whose list entry did not tell its build is described; the report lists
// each change's tasks in the list's order, whatever order the reads end
// in.
func TestScanReadsHistoriesBoundedAndReportsInListOrder(t *testing.T) {
	t.Parallel()
	const n = 60
	tasks := make([]openTask, n)
	var wantOld, wantUnpinned []string
	for i := range tasks {
		tasks[i] = openTask{wid: fmt.Sprintf("task-t%d", i), started: time.Unix(int64(1000+i), 0), build: unversioned, known: true}
		switch {
		case i == 7:
			tasks[i].known, tasks[i].build = false, "" // described: pinned to capstan/v1
		case i%10 == 3:
			tasks[i].build, tasks[i].pinned = "capstan/v2", true
		case i%2 == 1:
			wantOld = append(wantOld, fmt.Sprintf("t%d", i))
			fallthrough
		default:
			wantUnpinned = append(wantUnpinned, fmt.Sprintf("t%d", i))
		}
	}
	f := &fakeHistories{}
	if err := scanOpenTasks(context.Background(), f, converter.GetDefaultDataConverter(), tasks, nil); err != nil {
		t.Fatal(err)
	}
	if f.maxInFlight > historiesInFlight || f.maxInFlight < 2 {
		t.Errorf("%d reads in flight at most, want 2..%d", f.maxInFlight, historiesInFlight)
	}
	if slices.Contains(f.reads, "task-t3") || !slices.Contains(f.reads, "describe task-t7") || slices.Contains(f.reads, "task-t7") {
		t.Errorf("reads %v: want no history of pinned t3 or t7, and t7 described", f.reads)
	}
	rep := summarizeVersions(tasks)
	if got, want := rep.Builds, []buildRow{
		{Build: "capstan/v1", Pinned: true, Open: 1, Oldest: time.Unix(1007, 0)},
		{Build: "capstan/v2", Pinned: true, Open: 6, Oldest: time.Unix(1003, 0)},
		{Build: unversioned, Open: n - 7, Oldest: time.Unix(1000, 0)},
	}; !slices.Equal(got, want) {
		t.Errorf("builds %+v, want %+v", got, want)
	}
	for _, ch := range rep.Changes {
		want := wantOld
		if workflows.Changes[slices.IndexFunc(workflows.Changes, func(c workflows.Change) bool { return c.ID == ch.ID })].OwnMarkerOnly {
			want = wantUnpinned // a stamp does not stand for it
		}
		if !slices.Equal(ch.Tasks, want) || ch.MayNeedOld != len(want) || ch.Retire {
			t.Errorf("change %s: tasks %v, want %v", ch.ID, ch.Tasks, want)
		}
	}
}

// A scan's progress goes to its writer only when it is a terminal or the
// scan is long, no sooner than a tick, and ends with the last count.
func TestScanProgress(t *testing.T) {
	t.Parallel()
	var quiet bytes.Buffer
	p := &scanProgress{w: &quiet, what: "open tasks"}
	stop := p.start(progressAtLeast - 1)
	p.add(5)
	time.Sleep(progressTick + progressTick/2)
	stop()
	if quiet.Len() != 0 {
		t.Errorf("a short scan without a terminal said %q", quiet.String())
	}
	long := &testenv.Buffer{}
	p = &scanProgress{w: long, what: "open tasks"}
	stop = p.start(12000)
	p.add(500)
	for deadline := time.Now().Add(10 * time.Second); long.String() == "" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the first tick has no event to wait on
	}
	p.add(11500)
	stop()
	if lines := strings.Split(strings.TrimSpace(long.String()), "\n"); !slices.Equal(lines, []string{"read 500 of 12000 open tasks", "read 12000 of 12000 open tasks"}) {
		t.Errorf("a long scan said %q", lines)
	}
}
