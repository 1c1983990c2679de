// Package datasets reads labelled prompt datasets: JSONL rows of
// {"text","label"} with optional "source", "realism" and "id" columns.
// The shared sets live outside the repository; tests find them through
// TRIAGE_SHARED (default ../shared from the repository root), see Shared.
package datasets
