// Package grafana holds the gateway's Grafana dashboard, triage.json, and
// the tests that keep it true to the gateway. They start a gateway as
// `triage serve` does (router.New on a registry with the Go and process
// collectors, its HTTP server and Run, in front of sim replicas), with
// rules, a shadow candidate and access control so that every family of
// metrics appears, scrape its /metrics, and check the dashboard against
// it: each metric and label a query selects, groups by or matches on must
// be one the gateway exposes, and each triage_* metric it exposes must be
// on a panel or listed as left out. A metric or label renamed on one side
// and not the other fails the tests instead of leaving a panel empty.
//
// The PromQL is read by a parser of the language's expression grammar in
// promql_test.go, not by Prometheus's own: importing
// github.com/prometheus/prometheus moves the versions of several of the
// gateway's dependencies (OpenTelemetry, yaml/v4, reflect2) for a test's
// sake. It was compared with Prometheus's parser (v0.316.0) on every query
// of the dashboard and on the cases of TestParsePromQL, and built the same
// tree for each. It refuses what the check does not follow (label_replace
// and the other functions that name labels in strings) instead of passing
// it.
//
// The package has no code outside its tests.
package grafana
