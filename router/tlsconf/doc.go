// Package tlsconf builds the gateway's TLS configurations from PEM files:
// the edge's (the certificate clients see, optionally the CA their client
// certificates must chain to) and the client side's towards replicas served
// over https (the CA bundle to trust, optionally a client certificate).
//
// It owns reading, checking and hashing those files, and the edge
// certificate's rotation: a [Server] hands its certificate out through
// tls.Config.GetCertificate from an atomic pointer, and [Server.Reload]
// swaps in a new one when the files' content has changed. A bad pair at
// reload is an error and the previous certificate stays. Connections keep
// the certificate they were handshaken with.
//
// Every error names the config key and the file and says what is wrong
// ([Error]). Validity dates are not checked when loading: an expired or
// not yet valid certificate loads, and clients will refuse it; callers warn
// about it from [Server.Leaf].
//
// Both sides speak TLS 1.2 or later and offer only http/1.1 in ALPN.
//
// Concurrency: a Server's methods are safe for concurrent use; Reload calls
// are serialised, and handshakes never wait on them. The *tls.Config values
// returned are shared and must not be modified. The package starts no
// goroutines.
package tlsconf
