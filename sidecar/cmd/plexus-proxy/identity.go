package main

import (
	"log/slog"

	"github.com/plexus-mesh/plexus/mesh/identity/certify"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/proxy"
)

// newIdentity is how the proxy obtains and renews its certificate when
// PLEXUS_PROXY_IDENTITY_ADDR is set: the mesh/identity/certify client, with its
// key generated in memory and its projected token re-read for every CSR.
func newIdentity(cfg config.Config, log *slog.Logger) (proxy.Identity, error) {
	anchors, err := cfg.TrustAnchors()
	if err != nil {
		return nil, err
	}
	return certify.New(certify.Config{
		Addr:         cfg.IdentityAddr,
		ServerID:     cfg.IdentityServerID(),
		ID:           cfg.ID(),
		TokenFile:    cfg.TokenFile,
		TrustAnchors: anchors,
		Log:          log.With("component", "identity"),
	})
}
