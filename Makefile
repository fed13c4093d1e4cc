# capstan — see README.md.
#   make demo   install the pinned Temporal CLI, start a dev server with its UI,
#               the sandbox program and a worker pointed at it, and run the
#               sample task
#   make down   stop what `make demo` started
#   make cluster  build the pinned Temporal server and start a real cluster
#               on PostgreSQL (four services; prints export TEMPORAL_ADDRESS=)
#   make cluster-down  stop it (its databases stay)
#   make test   go vet, staticcheck, the gofmt check and the race-enabled
#               test suite, end to end against a real Temporal dev server
#   make test-long  the long runs (load, game day, rolling deploy, fairness,
#               time to certainty, and the tests that wait out a fixed backoff
#               or a token's lifetime)
#   make bench  capstan against a bare Temporal workflow, the ledger, history
#               growth, a downed dependency and time to certainty; writes
#               bench/results/ (make bench-certainty: that last table alone)

SHELL := /bin/bash
BIN := $(CURDIR)/.bin
TEMPORAL_VERSION := v1.5.1
TEMPORAL := $(BIN)/temporal
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/staticcheck

# Tests find the pinned CLI here (testsuite.DevServerOptions.ExistingPath).
export CAPSTAN_TEMPORAL_BIN := $(TEMPORAL)

.PHONY: demo down cluster cluster-down cluster-server test test-long build vet lint fmt-check temporal clean record-history compose-config bench bench-certainty

$(TEMPORAL):
	@echo "installing the Temporal CLI $(TEMPORAL_VERSION) into $(BIN) (a few minutes the first time)"
	GOBIN=$(BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

temporal: $(TEMPORAL)

$(STATICCHECK):
	@echo "installing staticcheck $(STATICCHECK_VERSION) into $(BIN)"
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The worker, the starter and the sandbox program (offline fakes of the
# model provider, GitHub and Slack, which the worker does not contain).
build:
	go build -o $(BIN)/ ./cmd/worker ./starter ./internal/sandbox/cmd/sandbox

# The modules under examples/ are modules of their own, outside capstan's
# module path, so Go forbids them internal/ as it would any user's: the
# root's ./... does not reach them, and each target names them.
EXAMPLES := examples/tickets

vet:
	go vet ./...
	for m in $(EXAMPLES); do (cd $$m && go vet ./...) || exit 1; done

# Formatting is checked, not fixed: a file gofmt would change fails the build.
fmt-check:
	@files=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$files" ]; then echo "gofmt would change:"; echo "$$files"; exit 1; fi

lint: $(STATICCHECK) fmt-check
	$(STATICCHECK) ./...
	for m in $(EXAMPLES); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

# The end-to-end tests (internal/e2e) run four at a time (t.Parallel; the
# package sets -parallel 4 unless it is given): they mostly wait on timers
# in other processes. About 8 minutes for that package on two cores.
test: $(TEMPORAL) vet lint
	go test -race -count=1 -timeout 25m ./...
	for m in $(EXAMPLES); do (cd $$m && go test -race -count=1 -timeout 10m -v ./...) || exit 1; done

# The long runs — a game day, a rolling deploy, fairness under a burst, load,
# time to certainty, a branch absent five times, GitHub App tokens outliving
# their task — are the e2e tests named TestLong…; `make test` compiles them
# and skips them. They run one at a time. The TestLongCluster… rows run on a
# real Temporal cluster (internal/testenv.StartCluster: the pinned server,
# which this target builds into .bin/ the first time, about 5 minutes, over
# the PostgreSQL of CAPSTAN_TEST_POSTGRES_DSN, `eval "$$(scripts/postgres.sh
# start)"`); without that variable they are skipped, except under CI=true.
test-long: $(TEMPORAL) cluster-server
	CAPSTAN_LONG=1 go test -count=1 -timeout 45m -run '^TestLong' -v ./internal/e2e/

# The benchmark (bench/, a program, not a test): about ten minutes on two
# idle cores. It measures capstan beside a bare Temporal workflow doing the
# same work, writes bench/results/latest.md and latest.svg and prints the
# table. With CAPSTAN_TEST_POSTGRES_DSN set (scripts/postgres.sh) it measures
# the PostgreSQL ledger too. It ends with the time-to-certainty table
# (internal/e2e's faults, three runs); `make bench-certainty` produces that
# table alone, in bench/results/time-to-certainty-latest.md; `go run ./bench
# -load` the throughput and latency table alone, in a few minutes, written
# outside bench/results/ unless -out is given; `-pool-ledger postgres://…`
# puts the 2-worker pool on PostgreSQL. `make test` runs none of them.
bench: $(TEMPORAL)
	go run ./bench

bench-certainty: $(TEMPORAL)
	go run ./bench -certainty

demo: $(TEMPORAL) build
	@scripts/demo.sh

down:
	@scripts/down.sh

# A real Temporal cluster: the pinned server built from its Go module into
# .bin/ (about 4 minutes the first time), on the PostgreSQL of
# scripts/postgres.sh, frontend, history, matching and worker as four
# processes, state in /tmp/capstan-cluster-$UID. `eval "$(make -s cluster)"`
# points this shell at it. The tests start clusters of their own
# (TestLongCluster…, in `make test-long`).
cluster: $(TEMPORAL) cluster-server
	@scripts/temporal-cluster.sh start

# The pinned Temporal server and its SQL schema tool, built into .bin/ (a
# no-op when they are there at the pinned version).
cluster-server:
	@scripts/temporal-cluster.sh install

cluster-down:
	@scripts/temporal-cluster.sh stop

clean: down
	rm -rf .capstan

# Record the histories the replay test replays: every end-to-end test that
# calls recordHistory writes internal/workflows/testdata/<HistoryVersion>-<case>.json,
# HistoryVersion being the label in internal/workflows/version.go. Files are never
# overwritten (a test fails rather than replace one): when workflow logic
# changes behind workflow.GetVersion, bump HistoryVersion and run this to
# record the new version's histories next to the old ones.
record-history: $(TEMPORAL)
	CAPSTAN_RECORD_HISTORY=1 go test -count=1 -timeout 15m ./internal/e2e/

# Check docker-compose.yml with `docker compose config` (builds the compose
# CLI plugin from the Go module proxy the first time; about a minute).
compose-config:
	@scripts/install-compose.sh >/dev/null
	docker compose config -q && echo "docker-compose.yml: ok"
