package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
	_ "github.com/capstanhq/capstan/internal/ledger/sqlite" // the sqlite driver
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// demoContents are strings of the demo task's contents: the prompt, the
// model's text, the file it writes, the pull request's body.
var demoContents = []string{
	"greeting to the repository on a new branch", // prompt
	"make a branch for the change",               // model text, turn 1
	"Done. I created the branch",                 // model text, last turn
	"written by a durable agent task",            // file body
	"greeting written by capstan",                // pull request body
}

func codecKey(t *testing.T, id string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}

// TestEncryptedDemoTask: with CAPSTAN_CODEC_KEYS, the raw history and the
// ledger file of the demo task hold none of its contents; `starter
// codec-server` shows them to `temporal workflow show`; after a rotation
// (new key first) the task still replays and displays; without its key,
// one error names the key.
//
// Not t.Parallel: it and TestStarterDemoOnSandboxWorker run `starter demo` on the
// sandbox's own queue, capstan-sandbox, whose worker would take the other's task.
func TestEncryptedDemoTask(t *testing.T) {
	oldKey, newKey := codecKey(t, "e2e-old"), codecKey(t, "e2e-new")
	var env []string
	for _, kv := range baseEnv(t, "unused") {
		if !strings.HasPrefix(kv, "CAPSTAN_TASK_QUEUE=") {
			env = append(env, kv)
		}
	}
	ledgerPath := strings.TrimPrefix(envValue(env, "CAPSTAN_LEDGER_DSN"), "sqlite://")
	oldEnv := append(append([]string(nil), env...), "CAPSTAN_CODEC_KEYS="+oldKey)
	sb := startSandboxProgram(t)
	w := startWorker(t, append(append([]string(nil), oldEnv...), sb.env...), "--log-format", "text")
	r := runStarter(t, oldEnv, "demo", "--json")
	if r.code != 0 {
		t.Fatalf("starter demo exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("demo result = %+v", res)
	}
	w.stop(t, syscall.SIGTERM, time.Minute) // the ledger's file is complete

	// The raw history, read without the codec.
	raw := rawHistory(t, res.WorkflowID)
	if !bytes.Contains(raw, []byte(codec.Encoding)) || !bytes.Contains(raw, []byte("e2e-old")) {
		t.Fatalf("the raw history has no payload encrypted under e2e-old")
	}
	var ledger []byte
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, _ := os.ReadFile(ledgerPath + suffix)
		ledger = append(ledger, b...)
	}
	if len(ledger) == 0 {
		t.Fatalf("no ledger file at %s", ledgerPath)
	}
	for _, s := range demoContents {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the raw history holds %q in plaintext", s)
		}
		if bytes.Contains(ledger, []byte(s)) {
			t.Errorf("the ledger's file holds %q in plaintext", s)
		}
	}

	// Rotation: the new key first, the old one after. The codec server and
	// the replayer read the old task.
	rotated := newKey + "," + oldKey
	url := startCodecServer(t, append(append([]string(nil), env...), "CAPSTAN_CODEC_KEYS="+rotated, "CAPSTAN_CODEC_AUTH=e2e-token"))
	shown := showWorkflow(t, res.WorkflowID, "--codec-endpoint", url, "--codec-auth", "Bearer e2e-token")
	shown = payloadText(t, shown)
	for _, s := range demoContents[:3] { // the file's and pull request's bodies live in the ledger alone
		if !strings.Contains(shown, s) {
			t.Errorf("temporal workflow show through the codec server does not show %q", s)
		}
	}
	items := ledgerItems(t, ledgerPath, rotated)
	for _, s := range demoContents[3:] {
		if !strings.Contains(items, s) {
			t.Errorf("the ledger's items, decrypted with the rotated keys, do not hold %q", s)
		}
	}
	if plain := payloadText(t, showWorkflow(t, res.WorkflowID)); strings.Contains(plain, demoContents[0]) {
		t.Errorf("temporal workflow show without the codec server shows the prompt")
	}
	if err := replay(t, res.WorkflowID, rotated); err != nil {
		t.Errorf("replay after the rotation: %v", err)
	}
	rotatedEnv := append(append([]string(nil), env...), "CAPSTAN_CODEC_KEYS="+rotated)
	if st := runStarter(t, rotatedEnv, "status", res.TaskID, "--json"); st.code != 0 || decodeResult(t, st).Status != workflows.StatusCompleted {
		t.Errorf("starter status after the rotation: exit %d, %s %s", st.code, st.stdout, st.stderr)
	}

	// The old key gone: one error naming it.
	if err := replay(t, res.WorkflowID, newKey); err == nil || !strings.Contains(err.Error(), `"e2e-old"`) {
		t.Errorf("replay without the old key: %v; want an error naming key id e2e-old", err)
	}
	st := runStarter(t, append(append([]string(nil), env...), "CAPSTAN_CODEC_KEYS="+newKey), "status", res.TaskID)
	if st.code == 0 || !strings.Contains(st.stderr, `key id "e2e-old"`) || strings.Count(strings.TrimSpace(st.stderr), "\n") != 0 {
		t.Errorf("starter status without the old key: exit %d, stderr %q; want one line naming key id e2e-old", st.code, st.stderr)
	}
	bad := runStarter(t, append(append([]string(nil), env...), "CAPSTAN_CODEC_KEYS=e2e-old"), "status", res.TaskID)
	if bad.code == 0 || !strings.HasPrefix(bad.stderr, "starter: CAPSTAN_CODEC_KEYS") || strings.Count(strings.TrimSpace(bad.stderr), "\n") != 0 {
		t.Errorf("a malformed CAPSTAN_CODEC_KEYS: exit %d, stderr %q; want one sentence naming it", bad.code, bad.stderr)
	}
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// rawHistory is every event of the workflow's history as the server
// stores it, marshalled: payloads as their bytes, not base64.
func rawHistory(t *testing.T, workflowID string) []byte {
	t.Helper()
	var raw []byte
	it := temporal.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, b...)
	}
	return raw
}

// replay replays the workflow's history with a data converter over keys.
func replay(t *testing.T, workflowID, keys string) error {
	t.Helper()
	k := codecKeys(t, keys)
	h := &historypb.History{}
	it := temporal.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		DataConverter: converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), k)})
	if err != nil {
		t.Fatal(err)
	}
	r.RegisterWorkflow(workflows.AgentTask)
	return r.ReplayWorkflowHistory(nil, h)
}

// showWorkflow runs `temporal workflow show -o json` with args.
func showWorkflow(t *testing.T, workflowID string, args ...string) string {
	t.Helper()
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"workflow", "show", "--address", devServerAddr, "--namespace", "default",
		"--workflow-id", workflowID, "--output", "json"}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("temporal workflow show %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// ledgerItems is the data of every item of the SQLite ledger at path,
// decrypted with keys, one per line.
func ledgerItems(t *testing.T, path, keys string) string {
	t.Helper()
	k := codecKeys(t, keys)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT data FROM items")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out strings.Builder
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		if !codec.IsSealed(b) {
			t.Errorf("an item is stored in plaintext: %.80q", b)
		}
		plain, err := k.Open(b)
		if err != nil {
			t.Fatalf("decrypt an item: %v", err)
		}
		out.Write(plain)
		out.WriteByte('\n')
	}
	return out.String()
}

// payloadText is the data of every payload in history JSON as the CLI
// prints it (base64), decoded, one per line.
func payloadText(t *testing.T, history string) string {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(history), &doc); err != nil {
		t.Fatalf("temporal workflow show printed no JSON: %v", err)
	}
	var out strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "data" {
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						out.Write(b)
						out.WriteByte('\n')
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out.String()
}

// startCodecServer runs `starter codec-server` on a free loopback port
// until the test ends and returns its URL.
func startCodecServer(t *testing.T, env []string) string {
	t.Helper()
	cmd := exec.Command(starterBin, "codec-server", "--addr", "127.0.0.1:0")
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		_ = cmd.Wait()
		t.Fatalf("codec-server printed nothing: %s", stderr.String())
	}
	line := sc.Text() // codec server: http://127.0.0.1:PORT (…)
	url, _, _ := strings.Cut(strings.TrimPrefix(line, "codec server: "), " ")
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("codec-server printed %q", line)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return url
}

// codecKeys are the keys a CAPSTAN_CODEC_KEYS value names.
func codecKeys(t *testing.T, keys string) *codec.Keys {
	t.Helper()
	list, err := config.ParseCodecKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	k, err := codec.New(list)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
