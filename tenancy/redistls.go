package tenancy

import (
	"crypto/tls"
	"errors"

	"github.com/triagegw/triage/router/tlsconf"
)

// RedisTLS is Redis over TLS (Redis 6 or later serving
// its tls-port). Off by default: Redis on a private network is commonly
// spoken to in the clear.
type RedisTLS struct {
	// Enabled connects over TLS.
	Enabled bool `koanf:"enabled"`
	// CAFile is the PEM bundle of CAs Redis's certificate must chain to,
	// instead of the system roots.
	CAFile string `koanf:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, for a
	// Redis that asks for one (tls-auth-clients yes). Both or neither.
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
	// ServerName is the name verified in Redis's certificate (and sent as
	// SNI) instead of addr's host.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify accepts any certificate. For tests only.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// config is the client TLS configuration, nil when TLS is off, or every
// problem with the settings, each under access.redis.tls.
func (c *RedisTLS) config() (*tls.Config, []error) {
	if !c.Enabled {
		if *c != (RedisTLS{}) {
			return nil, []error{errors.New("access.redis.tls.enabled: false, yet other tls settings are given: set enabled: true, or remove them")}
		}
		return nil, nil
	}
	cfg, err := tlsconf.NewClient(c.CAFile, c.CertFile, c.KeyFile, c.ServerName, c.InsecureSkipVerify)
	if err != nil {
		return nil, tlsconf.Problems("access.redis.tls", err)
	}
	cfg.NextProtos = nil // Redis negotiates no application protocol
	return cfg, nil
}
