package activities

// What the breaker is told of a call's ending, for the tests.
var (
	ToolHealth  = toolHealth
	SlackHealth = slackHealth
	ModelHealth = modelHealth
)
