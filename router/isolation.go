package router

import (
	"github.com/triagegw/triage/openai"
	"github.com/triagegw/triage/router/config"
	"github.com/triagegw/triage/router/proxy"
	"github.com/triagegw/triage/tenancy"
)

// isolate keeps the caller's prompts apart from other tenants' in the
// pool's prefix cache: with access control on, a request to a pool that
// salts (pool.Config.CacheSalt) carries the caller's cache_salt in place
// of whatever it carried, or, when the client sent one, a salt derived
// from both (tenancy.Caller.CacheSaltWith), and its prefix affinity is
// the caller's own (x.part). A cache_salt given twice, or not a non-empty
// string, is refused. Without access control the body goes as sent.
func (x *exchange) isolate(fr *proxy.Request) error {
	if x.s.access == nil || !x.e.salts {
		return nil
	}
	client, oe := openai.ClientSalt(x.body, &x.req)
	if oe != nil {
		return oe
	}
	salt := x.caller.CacheSalt()
	if client != nil {
		salt = x.caller.CacheSaltWith(client)
	}
	fr.Salt = openai.Salt(&x.req, salt)
	x.part = x.caller.Partition()
	return nil
}

// checkSalts warns, when a config is loaded, of salts that only this
// replica derives while the config shares state with other replicas
// (access.redis): a tenant's requests through two replicas would then
// not share the prefix cache of the pools that salt.
func (g *Gateway) checkSalts(cfg *config.Config, as *tenancy.Snapshot) {
	if !cfg.Access.Redis.Enabled() || !as.SaltSecretRandom() {
		return
	}
	for i := range cfg.Pools {
		if cfg.Pools[i].Salts() {
			g.log.Warn("access.cache_salt_secret is not set: this replica salts each tenant's requests with a secret of its own, so a tenant's requests through another replica, or after a restart, do not share the prefix cache; give every replica the same secret (TRIAGE_ACCESS__CACHE_SALT_SECRET)",
				"pool", cfg.Pools[i].Name)
			return
		}
	}
}
