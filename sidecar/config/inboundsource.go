package config

import "github.com/plexus-mesh/plexus/mesh/podcontract"

// EnvInboundSource names the loopback addresses, one per IP family, the
// inbound side binds when it dials the application (still at the pod
// address it was sent to). The injector sets it, and the CNI plugin then
// writes the pod's self-call rules: the proxy's own connections to the
// pod's addresses go through the inbound side, and those from these
// sources are let through to the application.
const EnvInboundSource = podcontract.EnvInboundSource

// inboundSourceFromEnv reads EnvInboundSource.
func (c *Config) inboundSourceFromEnv(get func(string) (string, bool)) error {
	v, ok := get(EnvInboundSource)
	if !ok {
		return nil
	}
	addrs, err := podcontract.ParseInboundSource(v)
	if err != nil {
		return err
	}
	c.InboundSource = addrs
	return nil
}
