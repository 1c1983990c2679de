# Build: docker build -t triage .
#   or without a daemon: bash scripts/build-image.sh, which writes this
#   image as an OCI image layout in var/image (tagged triage:latest): the
#   binary built as below, this file's final stage as read by deploy/image
#   (keep it to COPY, ENV, USER, EXPOSE and JSON-form ENTRYPOINT/CMD, or
#   teach deploy/image the new instruction), on a base made of the Debian
#   packages of distroless/cc that the gateway and ONNX Runtime use (glibc,
#   libgcc_s, libstdc++, CA certificates), pinned. go test ./deploy/image
#   checks the two agree and runs that image's process on its own files.
# Run:   make setup    # builds var/models: tokenizer, tier-1 table, ONNX Runtime library, tier-2 encoder
#        docker run -p 8080:8080 -v $PWD/var/models:/models:ro \
#          -v $PWD/triage.yaml:/etc/triage/triage.yaml:ro triage
#
# The image holds the binary (with tier 2: cgo, -tags ort), the default rules
# and heads; model files come from a volume at /models (TRIAGE_MODELS), as
# they are built from registries and the labelled data by scripts/setup.sh.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -tags 'nomsgpack ort' -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/triage ./cmd/triage

# distroless/cc: glibc and libstdc++, which ONNX Runtime's library needs.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/triage /usr/local/bin/triage
COPY triage.yaml rules.yaml /etc/triage/
COPY models/heads /etc/triage/models/heads
ENV TRIAGE_MODELS=/models
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/triage"]
CMD ["serve", "--config", "/etc/triage/triage.yaml", "--listen", "0.0.0.0:8080"]
