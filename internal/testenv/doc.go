// Package testenv is what tests know of their environment: the repository's
// root, the model files `make setup` fetches and builds (var/models, or
// $TRIAGE_MODELS) and the shared datasets (../shared beside the
// repository, or $TRIAGE_SHARED).
//
// A test that needs such files asks for them with Models or Shared (or,
// when it learns of the absence from an error, Missing). When one is
// missing the test is skipped, naming it and how to get it, so that
// go test ./... passes on a fresh clone; with TRIAGE_REQUIRE_MODELS=1, as
// make test sets, it fails instead, so that no test of the classifiers
// skips unseen. TRIAGE_REQUIRE_USE=1 does the same for the files under use/
// and use-int8/ (Universal Sentence Encoder lite, float and int8: both from
// scripts/fetch-use.sh), TRIAGE_REQUIRE_ORT=1 for those under
// ort/ (the ONNX Runtime library), and TRIAGE_REQUIRE_REDIS=1 for the
// redis-server Redis starts for a test (scripts/install-redis.sh).
//
// Receive waits for an event a test is told of (a hook's channel), Wait
// polls for a state it can only look at, both within a bound that fails
// the test: the one way tests here wait, never a bare time.Sleep.
//
// Buffer is the output tests read while a server, a child process or a
// worker writes it.
//
// Its functions are safe for concurrent use; but for Redis, which runs a
// server for its test, they only read the environment and the file
// system.
package testenv
