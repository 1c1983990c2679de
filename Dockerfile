# Build: docker build -t triage .
# Run:   docker run -p 8080:8080 -v $PWD/triage.yaml:/etc/triage/triage.yaml triage
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -tags nomsgpack -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/triage ./cmd/triage

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/triage /usr/local/bin/triage
COPY triage.yaml /etc/triage/triage.yaml
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/triage"]
CMD ["serve", "--config", "/etc/triage/triage.yaml", "--listen", "0.0.0.0:8080"]
