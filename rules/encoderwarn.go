package rules

import (
	"net/url"

	"github.com/triagegw/triage/internal/netaddr"
)

// plainKeyWarning is the warning for a remote encoder reached with an API
// key over plain HTTP on another host: the key, and the users' prompts
// tier 2 reads, cross the network in clear (encode serve refuses to take a
// key that way unless told --insecure-plain-http). A loopback engine, a
// sidecar, is fine; "" when there is nothing to say.
func plainKeyWarning(e *RemoteEncoder) string {
	if e == nil || e.APIKeyEnv == "" {
		return ""
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme != "http" {
		return ""
	}
	if netaddr.Loopback(u.Hostname()) {
		return ""
	}
	return "tier2.encoder: api_key_env over plain http to " + u.Host + ": the key and the prompts tier 2 reads cross the network in clear; serve the engine over https (ca_file) or on loopback"
}
