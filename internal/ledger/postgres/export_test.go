package postgres

// SchemaVersion is the newest schema version, for the external tests.
var SchemaVersion = schemaVersion
