package postgres

import "time"

// SchemaVersion is the newest schema version, for the external tests.
var SchemaVersion = schemaVersion

// Migrations are the schema's migrations, for the upgrade test.
var Migrations = migrations

// SetDatabaseClock makes now stand in for the database's clock in every
// decision and timestamp of s, so that the contract suite can move time.
// Without it, s reads clock_timestamp().
func SetDatabaseClock(s *Store, now func() time.Time) { s.testNow = now }
