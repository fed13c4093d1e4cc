package config

import (
	"strings"
	"testing"
)

func TestModelPricesOverrideAndAddToTheDefaults(t *testing.T) {
	c := FromEnv(env(map[string]string{"OPENAI_API_KEY": "k", "GITHUB_TOKEN": "g",
		"CAPSTAN_MODEL_PRICES": "openai:gpt-4.1=1/4, openai:local=0/0", "CAPSTAN_MAX_TOKENS_PER_TASK": "300", "CAPSTAN_MAX_COST_PER_TASK": "0.5"}))
	if err := c.ValidateWorker(); err != nil {
		t.Fatal(err)
	}
	if p := c.ModelPrices["openai:gpt-4.1"]; p != (Price{InputPerMillion: 1, OutputPerMillion: 4}) {
		t.Errorf("gpt-4.1 price = %+v, want the override 1/4", p)
	}
	if _, ok := c.ModelPrices["openai:local"]; !ok {
		t.Error("openai:local has no price; CAPSTAN_MODEL_PRICES added it")
	}
	if _, ok := c.ModelPrices["anthropic:claude-sonnet-4-5"]; !ok {
		t.Error("the defaults' claude-sonnet-4-5 price was lost")
	}
	if c.MaxTokensPerTask != 300 || c.MaxCostPerTask != 0.5 {
		t.Errorf("budgets = %d tokens, $%v; want 300 and 0.5", c.MaxTokensPerTask, c.MaxCostPerTask)
	}
	if got := (Price{InputPerMillion: 2, OutputPerMillion: 8}).Cost(1_000_000, 500_000); got != 6 {
		t.Errorf("cost = %v, want 6", got)
	}
}

func TestBadBudgetsStopTheWorker(t *testing.T) {
	for _, kv := range []map[string]string{
		{"CAPSTAN_MODEL_PRICES": "openai:gpt-4.1=2"},
		{"CAPSTAN_MAX_TOKENS_PER_TASK": "0"},
		{"CAPSTAN_MAX_COST_PER_TASK": "-1"},
	} {
		kv["OPENAI_API_KEY"], kv["GITHUB_TOKEN"] = "k", "g"
		err := FromEnv(env(kv)).ValidateWorker()
		if err == nil || !strings.Contains(err.Error(), "CAPSTAN_M") {
			t.Errorf("%v: err = %v, want one naming the setting", kv, err)
		}
	}
}
