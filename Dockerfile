# Capstan container image: the `worker` binary as entrypoint, with `starter`
# beside it (/usr/local/bin/starter). The offline sandbox (fake model
# provider, GitHub and Slack) is its own program and its own image, the
# target "sandbox"; the worker image does not contain it.
#
#   docker build -t capstan .
#   docker run --rm -e TEMPORAL_ADDRESS=host:7233 capstan            # worker
#   docker run --rm --entrypoint starter capstan --help              # CLI
#   docker build --target sandbox -t capstan-sandbox .               # sandbox
#
# Both binaries are static (CGO_ENABLED=0; the SQLite driver is pure Go), so the
# runtime image is distroless and runs as the unprivileged "nonroot" user
# (uid/gid 65532). The ledger lives on the /data volume by default.

ARG GO_VERSION=1.26.8

# ---- build ----------------------------------------------------------------
# Plain Dockerfile syntax (no BuildKit-only features), so it builds with any
# builder. Under BuildKit, TARGETOS/TARGETARCH pick the target platform; empty
# means the build host's.
FROM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly

# Dependencies first, as their own cached layer.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
RUN GOOS="${TARGETOS}" GOARCH="${TARGETARCH}" \
    go build -trimpath -ldflags="-s -w" -o /out/bin/ ./cmd/worker ./starter ./internal/sandbox/cmd/sandbox \
 && mkdir -p /out/data

# ---- sandbox --------------------------------------------------------------
# The fakes on fixed ports of every interface of the container (model 8081,
# GitHub 8082, Slack 8083), for a worker on the same network pointed at them
# through OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GITHUB_API_URL and
# SLACK_API_URL (docker-compose.yml, profile "sandbox"). Never publish them
# beyond that network: they accept any token.
FROM gcr.io/distroless/static-debian12:nonroot AS sandbox
COPY --from=build /out/bin/sandbox /usr/local/bin/
USER 65532:65532
EXPOSE 8081 8082 8083
ENTRYPOINT ["/usr/local/bin/sandbox", "--model-addr", ":8081", "--github-addr", ":8082", "--slack-addr", ":8083"]

# ---- runtime --------------------------------------------------------------
# Last, so it is the default target.
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/bin/worker /out/bin/starter /usr/local/bin/
# Writable ledger directory owned by nonroot; a fresh named volume mounted at
# /data inherits this ownership.
COPY --from=build --chown=65532:65532 /out/data /data

# Everything else (TEMPORAL_ADDRESS, secrets, ...) comes from the environment
# at run time; secrets are never baked into the image.
ENV CAPSTAN_LEDGER_DSN=sqlite:///data/ledger.db

VOLUME ["/data"]
WORKDIR /data
USER 65532:65532

ENTRYPOINT ["/usr/local/bin/worker"]
