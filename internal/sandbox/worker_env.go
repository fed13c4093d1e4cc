package sandbox

// Token is what [Sandbox.WorkerEnv] gives a worker for every credential.
// The fakes accept any token; this one says it is not a secret, and is not
// a word that appears in ordinary messages, since providers redact their
// key from error text.
const Token = "capstan-sandbox-token-not-a-secret"

// WorkerEnv is the environment that points an ordinary capstan worker at
// the sandbox's servers, through the base-URL settings that point it at the
// real services, and keeps it on queue, as KEY=value lines. Every
// credential is [Token].
func (sb *Sandbox) WorkerEnv(queue string) []string {
	return []string{
		"CAPSTAN_TASK_QUEUE=" + queue,
		"OPENAI_BASE_URL=" + sb.ModelURL,
		"OPENAI_API_KEY=" + Token,
		"ANTHROPIC_BASE_URL=" + sb.AnthropicURL,
		"ANTHROPIC_API_KEY=" + Token,
		"GITHUB_API_URL=" + sb.GitHubURL,
		"GITHUB_TOKEN=" + Token,
		"SLACK_API_URL=" + sb.SlackURL,
		"SLACK_BOT_TOKEN=" + Token,
	}
}
