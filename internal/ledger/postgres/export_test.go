package postgres

// SchemaVersion is the newest schema version, for the external tests.
var SchemaVersion = schemaVersion

// Migrations are the schema's migrations, for the upgrade test.
var Migrations = migrations
