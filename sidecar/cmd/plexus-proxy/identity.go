package main

import "github.com/plexus-mesh/plexus/sidecar/proxy"

// identityConstructor returns how this build obtains the proxy's
// certificate when PLEXUS_PROXY_IDENTITY_ADDR is set. The identity client
// (control/certify) is not in this build yet, so it returns nil and
// proxy.Run refuses to start with identity configured
// (proxy.ErrIdentityNotWired) instead of silently running plaintext.
// Wiring it is this body (certify.Client has Run, Ready, ID, Roots and
// Certificate, so it satisfies proxy.Identity):
//
//	return func(cfg config.Config, log *slog.Logger) (proxy.Identity, error) {
//		anchors, err := cfg.TrustAnchors()
//		if err != nil {
//			return nil, err
//		}
//		return certify.New(certify.Config{
//			Addr:         cfg.IdentityAddr,
//			ServerID:     cfg.IdentityServerID(),
//			ID:           cfg.ID(),
//			TokenFile:    cfg.TokenFile,
//			TrustAnchors: anchors,
//			Log:          log.With("component", "identity"),
//		})
//	}
func identityConstructor() proxy.NewIdentityFunc {
	return nil
}
