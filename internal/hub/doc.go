// Package hub is a client of the Hugging Face hub (huggingface.co or a
// mirror speaking its protocol): it downloads files of dataset and model
// repositories into a local cache laid out like huggingface_hub's, and
// lists a repository's files. It owns the network protocol (resolve URLs,
// redirects, metadata headers, error codes), the cache (layout, refs,
// resumable partial downloads, locks) and verification; it knows nothing
// of what the files hold. cmd/triage's "datasets" command is its user.
//
// # Protocol
//
// A file is {endpoint}/{datasets/}{repo}/resolve/{revision}/{file} (models
// have no prefix). Download sends a HEAD there first; the answer's headers
// say which commit the revision resolved to (X-Repo-Commit), the file's
// etag (X-Linked-Etag, else ETag: the sha256 of the content for LFS files,
// the git blob sha1 for regular files) and its size (X-Linked-Size, else
// Content-Length). LFS files answer with a redirect to a CDN on another
// host; the client follows redirects itself so that the token
// (Authorization: Bearer $HF_TOKEN) is sent to the hub's own origin
// (scheme, host and port) only, never to a CDN. Errors carry the hub's
// X-Error-Code: see ErrAuth, ErrRepoNotFound, ErrRevisionNotFound and
// ErrFileNotFound.
//
// # Cache
//
// The cache directory (Client.CacheDir, else $TRIAGE_HUB_CACHE, else
// $XDG_CACHE_HOME/triage/hub, else ~/.cache/triage/hub) holds, per repo:
//
//	{cache}/datasets--{org}--{name}/            (models--{org}--{name} for models)
//	    blobs/{etag}                             the content, named by its etag
//	    blobs/{etag}.incomplete                  a partial download, resumed with Range
//	    snapshots/{commit}/{file}                relative symlink to ../../blobs/{etag} (a copy where symlinks fail)
//	    refs/{revision}                          the commit a branch or tag last resolved to
//	{cache}/.locks/{repo folder}/{etag}.lock     download lock files
//
// Two commits holding the same content share a blob. A repeated Download of
// a branch or tag costs one HEAD (to learn whether the revision moved); a
// Download at a commit sha that is cached costs no request at all, since a
// commit never changes. In offline mode (Client.Offline or
// HF_HUB_OFFLINE=1) no request is made: the file is served through
// refs/{revision} and the snapshot, or Download fails with ErrOffline. When
// the hub cannot answer (no connection, a 5xx, a 429) and the revision's
// file is cached, Download serves the cached copy as huggingface_hub does;
// a refusal (401, 403) or a 404 is an error, cached or not.
//
// # Verification
//
// Downloads go to blobs/{etag}.incomplete and are renamed into place only
// when whole: the size must equal the announced size, and the content must
// hash to the etag when the etag says what the hash is (64 hex digits: the
// sha256 of an LFS file; 40 hex digits with a known size: the git blob sha1
// of a regular file). A mismatch deletes the partial file and fails with
// ErrCorrupt. An interrupted transfer is retried within the call from
// where it stopped (Range: bytes=N-, expecting 206; a 200 restarts from
// zero), and a call that gives up leaves the partial file for the next
// call to resume.
//
// # Concurrency
//
// A Client is safe for concurrent use by several goroutines once its
// fields are set; the zero Client works and reads its defaults from the
// environment at each call. Downloads of the same blob are serialized by a
// process-wide mutex per blob (so two Clients sharing a cache agree) and,
// on Unix systems, by an flock(2) on the blob's lock file, so that two
// processes do not write one partial file; the second downloader finds the
// blob in place and only links its snapshot. Waiting for a lock honours
// the context. Snapshot links and refs are written to a temporary name and
// renamed, so readers never see half a file.
package hub
