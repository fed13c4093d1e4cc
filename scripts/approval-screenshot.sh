#!/usr/bin/env bash
# approval-screenshot.sh: the Temporal UI's current details of a task whose
# github_put_file waits for approval, with the call's content and hash
# (docs/images/approval-ui.png), and the text of the Slack notice the task
# posted for it (printed). A dev server with its UI, the sandbox and a
# worker, all on ports of their own, one task started with
# --require-approval github_put_file --slack '#approvals', then headless
# chromium. Everything it starts it stops. Built as codec-screenshot.sh is.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The output path, from the caller's directory when relative.
OUT=${1:-$ROOT/docs/images/approval-ui.png}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
cd "$ROOT"
BIN=$PWD/.bin
TEMPORAL=${CAPSTAN_TEMPORAL_BIN:-$BIN/temporal}
PORT=${PORT:-27243}; UI_PORT=${UI_PORT:-28243}
STATE=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
mkdir -p "$STATE/bin"
go build -o "$STATE/bin/worker" ./cmd/worker && go build -o "$STATE/bin/starter" ./starter && go build -o "$STATE/bin/sandbox" ./internal/sandbox/cmd/sandbox

export TEMPORAL_ADDRESS=127.0.0.1:$PORT CAPSTAN_UI_URL=http://127.0.0.1:$UI_PORT
export CAPSTAN_LEDGER_DSN=sqlite://$STATE/ledger.db CAPSTAN_METRICS_ADDR= CAPSTAN_STREAM_ADDR=

# The server settings capstan relies on, as `make demo` starts its server.
server_settings=()
while IFS= read -r flag; do server_settings+=("$flag"); done < <(scripts/dev-server-flags.sh)
"$TEMPORAL" server start-dev --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" --log-level error \
  "${server_settings[@]}" >"$STATE/temporal.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do "$TEMPORAL" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1 && break; sleep 0.5; done
"$STATE/bin/sandbox" --env-file "$STATE/sandbox.env" --task-queue capstan-sandbox >"$STATE/sandbox.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [ -s "$STATE/sandbox.env" ] && break; sleep 0.25; done
set -a; . "$STATE/sandbox.env"; set +a
"$STATE/bin/worker" --log-format text >"$STATE/worker.log" 2>&1 &
pids+=($!)
# The worker registers capstan's search attributes before it polls; the
# starter refuses a task until they exist.
worker=$!
for _ in $(seq 1 120); do grep -q "polling task queue" "$STATE/worker.log" && break; kill -0 "$worker" 2>/dev/null || break; sleep 0.5; done
grep -q "polling task queue" "$STATE/worker.log" || { echo "the worker did not start polling:" >&2; tail -5 "$STATE/worker.log" >&2; exit 1; }
TASK=approval-ui-$(date +%s)
"$STATE/bin/starter" run --prompt "Add a HELLO.md greeting and open a pull request." --repo capstan-sandbox/demo \
  --model openai:demo --id "$TASK" --require-approval github_put_file --slack '#approvals' >/dev/null
for _ in $(seq 1 120); do "$STATE/bin/starter" list --awaiting-approval | grep -q "$TASK" && break; sleep 0.5; done
"$STATE/bin/starter" status "$TASK"
WID=task-$TASK
URL="http://127.0.0.1:$UI_PORT/namespaces/default/workflows/$WID"
# Headless chromium driven over its DevTools pipe: the UI polls a running
# workflow without end, so neither --virtual-time-budget (whose virtual
# time waits for the network) nor --timeout (which stops the page's
# requests) gives a picture of the details; this opens the page, lets it
# load for SHOT_WAIT seconds, opens the User Metadata tab (where the UI
# shows a workflow's current details) and captures it. timeout(1) bounds a browser
# that hangs all the same.
timeout 120 python3 - "$OUT" "$URL" "$STATE/chromium" <<'PY'
import base64, json, os, subprocess, sys, time
out, url, profile = sys.argv[1], sys.argv[2], sys.argv[3]
cmd_r, cmd_w = os.pipe()
res_r, res_w = os.pipe()
def child():
    os.dup2(cmd_r, 3); os.dup2(res_w, 4)
p = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--window-size=1400,1800",
    "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
    preexec_fn=child, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(cmd_r); os.close(res_w)
buf, n = b"", 0
def send(method, session=None, **params):
    global buf, n
    n += 1
    msg = {"id": n, "method": method, "params": params}
    if session: msg["sessionId"] = session
    os.write(cmd_w, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buf:
            chunk = os.read(res_r, 1 << 20)
            if not chunk: raise SystemExit("chromium closed its pipe")
            buf += chunk
        line, buf = buf.split(b"\0", 1)
        m = json.loads(line)
        if m.get("id") == n:
            if "error" in m: raise SystemExit(f"{method}: {m['error']}")
            return m["result"]
target = send("Target.createTarget", url=url)["targetId"]
session = send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
send("Emulation.setDeviceMetricsOverride", session, width=1400, height=1800, deviceScaleFactor=1, mobile=False)
time.sleep(float(os.environ.get("SHOT_WAIT", "10")))
tab = "User Metadata"
found = send("Runtime.evaluate", session, returnByValue=True, expression=
    "(() => { const e = [...document.querySelectorAll('a, button')].find(e => e.textContent.trim() == %s);"
    " if (e) e.click(); return !!e; })()" % json.dumps(tab))["result"].get("value")
if not found: raise SystemExit(f"the page has no {tab} tab")
time.sleep(3)
data = send("Page.captureScreenshot", session, format="png")["data"]
open(out, "wb").write(base64.b64decode(data))
try: send("Browser.close")
except SystemExit: pass
p.wait(timeout=20)
PY
echo "screenshot of $URL in $OUT"
# The notice, as the sandbox Slack holds it.
python3 - "$SLACK_API_URL" "$SLACK_BOT_TOKEN" <<'PY'
import json, sys, urllib.parse, urllib.request
api, token = sys.argv[1].rstrip("/") + "/", sys.argv[2]
def call(method, **args):
    data = urllib.parse.urlencode(dict(token=token, **args)).encode()
    return json.load(urllib.request.urlopen(api + method, data))
for ch in call("conversations.list").get("channels", []):
    if ch.get("name") == "approvals":
        for m in reversed(call("conversations.history", channel=ch["id"]).get("messages", [])):
            print("--- the Slack notice in #approvals ---")
            print(m.get("text", ""))
PY
