// Package proxy forwards a request to a pool replica and relays the answer
// to the client, streaming it frame by frame as it arrives.
//
// It owns its upstream connections instead of using net/http's Transport:
// each replica has a stack of idle keep-alive connections; a request is
// written in one call (writev for large bodies), the response head is parsed
// by hand, and the body is relayed straight from the connection's read
// buffer to the client, flushed whenever the next upstream read could block.
// Nothing is re-encoded and SSE events are never parsed. This halves the CPU
// per request against httputil.ReverseProxy (see bench/).
//
// Forward retries on another replica after a connect error or a 502/503/504
// answer, only while no byte has reached the client, bounded by the pool's
// attempt count and time budget. A client that leaves cancels the upstream
// request: its connection is closed, which vLLM takes as an abort.
// A Request's Trace sees each attempt and gives the W3C trace context
// written into its head, in place of the client's.
//
// A Transport is safe for concurrent use and starts no goroutines; idle
// connections past their idle timeout are closed as the stack is used, and
// CloseIdle closes the rest.
package proxy
