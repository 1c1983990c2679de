package tenancy

import "time"

// Principal is who a request acts for, as its credential says.
type Principal struct {
	// Name identifies the principal (a key's owner, a token's subject
	// claim).
	Name string
	// Groups are the groups it belongs to, in the order the credential
	// lists them.
	Groups []string
	// Key is the id of the API key used (not the secret); empty for a JWT.
	Key string
	// Expires is when the credential stops being valid; zero: never.
	Expires time.Time
}
