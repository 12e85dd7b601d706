// Package injectcmd is `plexus-control injector`: the proxy-injector admission
// webhook, serving HTTPS with a certificate it keeps itself.
package injectcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/inject"
	"github.com/plexus-mesh/plexus/control/webhookserver"
)

// Options are the injector's flags.
type Options struct {
	webhookserver.Flags
	TrustAnchorsFile string
	Inject           inject.Config
}

func parse(args []string, stderr io.Writer) (Options, error) {
	o := Options{Inject: inject.Config{Resources: inject.DefaultResources()}}
	fs := flag.NewFlagSet("injector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Flags.Register(fs, "plexus-injector", ":9995")
	fs.StringVar(&o.TrustAnchorsFile, "trust-anchors-file", "", "PEM file of the identity trust anchors given to proxies")
	fs.StringVar(&o.Inject.ProxyImage, "proxy-image", "plexus.dev/plexus-proxy:dev", "image of the injected proxy")
	fs.StringVar(&o.Inject.ProxyVersion, "proxy-version", "dev", "version recorded on injected pods")
	fs.StringVar(&o.Inject.TrustDomain, "trust-domain", "cluster.local", "identity trust domain")
	fs.StringVar(&o.Inject.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	if err := component.ParseFlags(fs, args, func() error { return o.Flags.Validate() }); err != nil {
		return o, err
	}
	if o.TrustAnchorsFile == "" {
		return o, errors.New("--trust-anchors-file is required")
	}
	anchors, err := os.ReadFile(o.TrustAnchorsFile)
	if err != nil {
		return o, fmt.Errorf("reading the trust anchors: %w", err)
	}
	o.Inject.TrustAnchorsPEM = string(anchors)
	o.Inject.ControlNamespace = o.Namespace
	if err := o.Inject.Validate(); err != nil {
		return o, fmt.Errorf("injection config: %w", err)
	}
	return o, nil
}

// Main runs the injector until ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	o, env, err := component.Begin(args, stderr, stderr, "plexus-injector", parse)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(env.Kube, 10*time.Minute)
	nsLister := factory.Core().V1().Namespaces().Lister()
	factory.Core().V1().Namespaces().Informer()
	factory.Start(ctx.Done())
	hook := &inject.Webhook{
		Config: o.Inject,
		Namespace: func(name string) (*corev1.Namespace, error) {
			return nsLister.Get(name)
		},
		Metrics: inject.NewMetrics(env.Registry),
		Log:     env.Log,
	}
	env.Log.Info("injector starting", "addr", o.Addr, "proxyImage", o.Inject.ProxyImage)
	return webhookserver.Run(ctx, webhookserver.Config{
		Addr: o.Addr, AdminAddr: o.AdminAddr, Routes: map[string]http.Handler{"/inject": hook}, Registry: env.Registry,
		Cert: o.Cert(false),
		// The namespace cache before serving.
		Start: func(ctx context.Context) error {
			for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
				if !ok {
					return fmt.Errorf("cache of %v never synced", typ)
				}
			}
			return nil
		},
		Log: env.Log,
	}, env.Kube)
}
