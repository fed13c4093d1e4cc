package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/ledger"
)

// A ledger written before decisions named their layer (its decisions table
// without the layer column, schema version 5) is upgraded when opened: a
// decision recorded then reads back with no layer, and one recorded after
// keeps its own. The upgrade is idempotent, as the others are.
func TestUpgradeAddsTheDecisionsLayer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := open(t, path, nil).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec(`ALTER TABLE decisions DROP COLUMN layer;
INSERT INTO decisions (operation_id, tenant, task_id, tool, effect, rule, reason, refused, created_at)
	VALUES ('op-old', 'default', 'T', 'github_put_file', 'deny', 'default/base-branch', 'main is the base', 1, 1);
PRAGMA user_version = 5;`); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		s := open(t, path, nil)
		ds, err := s.Decisions(ctx, "T")
		if err != nil || len(ds) != round+1 || ds[0].OperationID != "op-old" || ds[0].Layer != "" || ds[0].Rule != "default/base-branch" {
			t.Fatalf("round %d: Decisions = %+v, %v; want op-old first, by default/base-branch, without a layer", round, ds, err)
		}
		if round == 0 {
			d := ledger.Decision{OperationID: "op-new", Tenant: "default", TaskID: "T", Tool: "github_put_file", Effect: "allow",
				Rule: "docs-on-main", Layer: "worker /etc/capstan/policy.yaml@0123456789ab"}
			if got, created, err := s.RecordDecision(ctx, d); err != nil || !created || got.Layer != d.Layer {
				t.Fatalf("RecordDecision on the upgraded ledger = %+v, %v, %v; want created with layer %q", got, created, err, d.Layer)
			}
		} else if ds[1].Layer != "worker /etc/capstan/policy.yaml@0123456789ab" {
			t.Fatalf("reopened: op-new reads back with layer %q", ds[1].Layer)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := rawDB(t, path).Exec("PRAGMA user_version = 5"); err != nil { // round 1: says 5, has the column
			t.Fatal(err)
		}
	}
}
