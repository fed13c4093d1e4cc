package activities_test

import (
	"reflect"
	"testing"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
)

// The workflow schedules activities by the names in package contract; the
// worker registers *Activities, whose methods give those names. A method
// renamed without its contract name (or the other way round) fails here,
// not as an activity no worker serves.
func TestContractNamesEveryActivity(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeOf(&activities.Activities{})
	for name, want := range map[string]struct{ in, out any }{
		contract.ActivityModelTurn:          {contract.ModelTurnInput{}, contract.ModelTurnResult{}},
		contract.ActivityExecuteTool:        {contract.ExecuteToolInput{}, contract.ExecuteToolResult{}},
		contract.ActivityDeliver:            {contract.DeliverInput{}, contract.DeliverResult{}},
		contract.ActivityReconcile:          {contract.ReconcileInput{}, contract.ReconcileResult{}},
		contract.ActivityTruncateTranscript: {contract.TruncateInput{}, contract.TruncateResult{}},
		contract.ActivityWorkerLimits:       {contract.WorkerLimitsInput{}, contract.WorkerLimitsResult{}},
	} {
		m, ok := typ.MethodByName(name)
		if !ok {
			t.Errorf("*Activities has no method %s", name)
			continue
		}
		// (receiver, context, input) → (result, error)
		if m.Type.NumIn() != 3 || m.Type.In(2) != reflect.TypeOf(want.in) || m.Type.NumOut() != 2 || m.Type.Out(0) != reflect.TypeOf(want.out) {
			t.Errorf("%s is %s, want func(context.Context, %T) (%T, error)", name, m.Type, want.in, want.out)
		}
	}
}
