// Package webhookserver runs an admission webhook: its HTTPS server, with
// a serving certificate webhookcert keeps, and the admin endpoint.
package webhookserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/webhookcert"
)

// Config is one webhook server.
type Config struct {
	Addr      string // HTTPS listen address
	AdminAddr string // /metrics, /ready and /live
	// Routes maps request paths ("/inject") to the webhook's handlers.
	Routes   map[string]http.Handler
	Registry *prometheus.Registry
	// Cert names the certificate's Secret, Service and webhook
	// configuration; zero lifetimes mean CertValidity and CertRenewBefore,
	// and a nil Log means Log.
	Cert webhookcert.Config
	// Start, if set, runs once the certificate is in place and before the
	// webhook serves or reports ready (e.g. waiting for informer caches).
	Start func(context.Context) error
	// Listen opens the listeners; net.Listen when nil.
	Listen func(network, addr string) (net.Listener, error)
	Log    *slog.Logger
}

// Default certificate lifetimes.
const (
	CertValidity    = 365 * 24 * time.Hour
	CertRenewBefore = 30 * 24 * time.Hour
)

// Run serves until ctx ends or a server fails. The admin endpoint serves
// at once (/ready answers 503 until the webhook serves); the certificate
// is ensured first, retried with backoff since the webhook configuration
// may not exist yet when the Deployment starts, then renewed hourly.
func Run(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	cc := cfg.Cert
	if cc.Validity == 0 && cc.RenewBefore == 0 {
		cc.Validity, cc.RenewBefore = CertValidity, CertRenewBefore
	}
	if cc.Log == nil {
		cc.Log = cfg.Log
	}
	keeper, err := webhookcert.New(cc, client)
	if err != nil {
		return err
	}
	listen := cfg.Listen
	if listen == nil {
		listen = net.Listen
	}
	adminLn, err := listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	var ready atomic.Bool
	notReady := func() error {
		if !ready.Load() {
			return errors.New("no serving certificate yet, or not started")
		}
		return nil
	}
	webhook := func(ctx context.Context) error {
		if !ensure(ctx, keeper, cfg.Log) {
			return nil // ctx ended
		}
		if cfg.Start != nil {
			if err := cfg.Start(ctx); err != nil {
				return err
			}
		}
		go keeper.Run(ctx, time.Hour)
		mux := http.NewServeMux()
		for path, h := range cfg.Routes {
			mux.Handle(path, h)
		}
		ln, err := listen("tcp", cfg.Addr)
		if err != nil {
			return fmt.Errorf("webhook listener: %w", err)
		}
		srv := &http.Server{
			Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: keeper.GetCertificate},
			ErrorLog:  slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
		}
		ready.Store(true)
		defer ready.Store(false)
		cfg.Log.Info("webhook serving", "addr", ln.Addr().String())
		return component.HTTP("webhook server", ln, srv).Run(ctx)
	}
	return component.Run(ctx, component.Admin(adminLn, cfg.Registry, notReady), component.Part{Name: "webhook server", Run: webhook})
}

// ensure gets the serving certificate in place, retrying with backoff
// until it is or ctx ends (false).
func ensure(ctx context.Context, keeper *webhookcert.Keeper, log *slog.Logger) bool {
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		err := keeper.Ensure(ctx)
		if err == nil {
			return true
		}
		log.Warn("webhook certificate not ready; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
	}
}
