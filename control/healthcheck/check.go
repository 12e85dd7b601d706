// Package healthcheck verifies a cluster's Plexus installation: the control
// plane is available, the injector webhook is wired, the CNI plugin is on
// every node, the identity issuer is valid, the clocks agree, and the
// Servers let their pods' HTTP probes through; and, when the viz
// extension is installed, that its tap API and Deployments are available
// and its Prometheus scrapes every meshed pod.
package healthcheck

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Names of what is checked (deploy/).
const (
	Namespace      = "plexus-system"
	InjectorName   = "plexus-injector" // Deployment, Service and webhook configuration
	NodeDaemonSet  = "plexus-node"
	IssuerWarnLeft = 30 * 24 * time.Hour
	// MaxClockSkew fails the clock check: mesh/identity/pki backdates
	// certificates by one minute, so half of that leaves room for skew
	// between the nodes themselves.
	MaxClockSkew = 30 * time.Second
	// WarnClockSkew warns: more than this is a sign of an unsynchronised clock.
	WarnClockSkew = 5 * time.Second
)

// ControlPlaneDeployments must be available.
var controlPlaneDeployments = []string{"plexus-identity", "plexus-destination", InjectorName}

// Status of one check.
type Status int

// Statuses.
const (
	OK Status = iota
	Warn
	Fail
)

// How output shows each status: its name, its mark, and the mark's
// terminal colour (green, yellow, red).
var (
	statusNames   = [...]string{OK: "ok", Warn: "warn", Fail: "fail"}
	statusSymbols = [...]string{OK: "✔", Warn: "‼", Fail: "✘"}
	statusColours = [...]string{OK: "32", Warn: "33", Fail: "31"}
)

// String is the status's name: ok, warn or fail.
func (s Status) String() string { return statusNames[s.known()] }

// Symbol is the status's mark: ✔, ‼ or ✘.
func (s Status) Symbol() string { return statusSymbols[s.known()] }

// known is s, or Fail for a value that is not a status.
func (s Status) known() Status {
	if s < OK || s > Fail {
		return Fail
	}
	return s
}

// Result is one line of output.
type Result struct {
	Name   string
	Status Status
	Detail string // what was found, on warnings and failures
	Hint   string // what to do, on failures
}

// Config chooses the checks.
type Config struct {
	// NodeImageMode skips the DaemonSet: the plugin is in the node images.
	NodeImageMode bool
	// Proxy adds the data-plane checks of the pods of ProxyNamespace
	// ("": every namespace).
	Proxy          bool
	ProxyNamespace string
}

// Validate has nothing to refuse yet; it exists for the house style.
func (Config) Validate() error { return nil }

// Checker runs the checks. Its fields are what tests replace.
type Checker struct {
	Client kubernetes.Interface
	// Policy reads inbound policies (its Kube is Client's cluster).
	Policy inboundpolicy.Clients
	Now    func() time.Time
	// ServerTime returns the API server's clock (the Date header of a
	// response) and the local time at the middle of that request.
	ServerTime func(ctx context.Context) (server, local time.Time, err error)
	// Scrape reads a proxy's metrics, for the data-plane checks.
	Scrape Scraper
}

// Run runs every check, in order, and returns their results.
func (c Checker) Run(ctx context.Context, cfg Config) []Result {
	var rs []Result
	for _, name := range controlPlaneDeployments {
		rs = append(rs, c.deployment(ctx, name))
	}
	rs = append(rs, c.webhook(ctx), c.injectorEndpoints(ctx))
	if !cfg.NodeImageMode {
		rs = append(rs, c.daemonSet(ctx))
	}
	rs = append(rs, c.nodeTaints(ctx), c.issuer(ctx), c.clock(ctx), c.probes(ctx))
	rs = append(rs, c.vizChecks(ctx)...)
	if cfg.Proxy {
		rs = append(rs, c.proxyChecks(ctx, cfg.ProxyNamespace)...)
	}
	return rs
}

func ok(name string) Result { return Result{Name: name, Status: OK} }

func fail(name, hint, format string, a ...any) Result {
	return Result{Name: name, Status: Fail, Detail: fmt.Sprintf(format, a...), Hint: hint}
}

const installHint = "install Plexus: plexusctl install | kubectl apply -f -"

func (c Checker) deployment(ctx context.Context, name string) Result {
	return c.deploymentIn(ctx, Namespace, name, "control plane Deployment "+name+" is available", installHint)
}

// deploymentIn checks that Deployment ns/name has all its replicas
// available; missingHint is the hint when it does not exist.
func (c Checker) deploymentIn(ctx context.Context, ns, name, title, missingHint string) Result {
	d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(title, missingHint, "Deployment %s/%s not found", ns, name)
	}
	if err != nil {
		return fail(title, "check access to the cluster", "reading Deployment %s/%s: %v", ns, name, err)
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	available := false
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
			available = true
		}
	}
	if !available || d.Status.AvailableReplicas < want {
		return fail(title, fmt.Sprintf("kubectl -n %s describe deployment %s; kubectl -n %s logs deploy/%s", ns, name, ns, name),
			"%d of %d replicas available", d.Status.AvailableReplicas, want)
	}
	return ok(title)
}

func (c Checker) webhook(ctx context.Context) Result {
	title := "injector webhook configuration " + InjectorName + " has a CA bundle"
	w, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, InjectorName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(title, installHint, "MutatingWebhookConfiguration %s not found", InjectorName)
	}
	if err != nil {
		return fail(title, "check access to the cluster", "reading MutatingWebhookConfiguration %s: %v", InjectorName, err)
	}
	if len(w.Webhooks) == 0 {
		return fail(title, installHint, "it has no webhooks")
	}
	var empty []string
	for _, h := range w.Webhooks {
		if len(h.ClientConfig.CABundle) == 0 {
			empty = append(empty, h.Name)
		}
	}
	if len(empty) > 0 {
		return fail(title, fmt.Sprintf("the injector patches the CA in when it starts: kubectl -n %s logs deploy/%s", Namespace, InjectorName),
			"no caBundle on %s", strings.Join(empty, ", "))
	}
	return ok(title)
}

func (c Checker) injectorEndpoints(ctx context.Context) Result {
	title := "injector Service " + InjectorName + " has ready endpoints"
	hint := fmt.Sprintf("the webhook fails closed without them: kubectl -n %s get pods -l app.kubernetes.io/name=%s", Namespace, InjectorName)
	slices, err := c.Client.DiscoveryV1().EndpointSlices(Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + InjectorName})
	if err != nil {
		return fail(title, "check access to the cluster", "listing EndpointSlices of %s/%s: %v", Namespace, InjectorName, err)
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return ok(title)
			}
		}
	}
	return fail(title, hint, "no ready endpoint in %d EndpointSlices", len(slices.Items))
}

func (c Checker) daemonSet(ctx context.Context) Result {
	title := "CNI node agent DaemonSet " + NodeDaemonSet + " is ready on every node"
	ds, err := c.Client.AppsV1().DaemonSets(Namespace).Get(ctx, NodeDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fail(title, installHint+" (or pass --node-image-mode if the plugin is baked into the node images)", "DaemonSet %s/%s not found", Namespace, NodeDaemonSet)
	}
	if err != nil {
		return fail(title, "check access to the cluster", "reading DaemonSet %s/%s: %v", Namespace, NodeDaemonSet, err)
	}
	st := ds.Status
	if st.DesiredNumberScheduled == 0 || st.NumberReady < st.DesiredNumberScheduled || st.NumberMisscheduled > 0 {
		return fail(title, fmt.Sprintf("kubectl -n %s get pods -l app.kubernetes.io/name=%s -o wide", Namespace, NodeDaemonSet),
			"%d of %d node agents ready (%d misscheduled)", st.NumberReady, st.DesiredNumberScheduled, st.NumberMisscheduled)
	}
	return ok(title)
}

func (c Checker) nodeTaints(ctx context.Context) Result {
	title := "CNI plugin installed on every node (no " + podcontract.NodeTaintKey + " taint)"
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fail(title, "check access to the cluster", "listing nodes: %v", err)
	}
	var tainted []string
	for _, n := range nodes.Items {
		for _, t := range n.Spec.Taints {
			if t.Key == podcontract.NodeTaintKey {
				tainted = append(tainted, n.Name)
				break
			}
		}
	}
	if len(tainted) > 0 {
		return fail(title, fmt.Sprintf("the node agent removes the taint once the plugin is in place: kubectl -n %s logs -l app.kubernetes.io/name=%s", Namespace, NodeDaemonSet),
			"tainted: %s", strings.Join(tainted, ", "))
	}
	return ok(title)
}

func (c Checker) issuer(ctx context.Context) Result {
	title := "identity issuer certificate is valid and chains to the trust anchors"
	hint := "create a new issuer: plexusctl install --identity-trust-anchors-file ... (or plexus-control issuer) | kubectl apply -f -"
	s, err := c.Client.CoreV1().Secrets(Namespace).Get(ctx, identity.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		return fail(title, installHint, "reading Secret %s/%s: %v", Namespace, identity.DefaultSecretName, err)
	}
	chain, err := pki.ParseCerts(s.Data[identity.SecretCertKey])
	if err != nil {
		return fail(title, hint, "Secret %s/%s %s: %v", Namespace, identity.DefaultSecretName, identity.SecretCertKey, err)
	}
	now := c.Now()
	cert := chain[0]
	if now.After(cert.NotAfter) {
		return fail(title, hint, "issuer %q expired at %s", cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(cert.NotBefore) {
		return fail(title, "check this machine's clock, or the issuer's", "issuer %q is not valid before %s", cert.Subject.CommonName, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	cm, err := c.Client.CoreV1().ConfigMaps(Namespace).Get(ctx, identitycmd.AnchorsConfigMap, metav1.GetOptions{})
	if err != nil {
		return fail(title, installHint, "reading ConfigMap %s/%s: %v", Namespace, identitycmd.AnchorsConfigMap, err)
	}
	anchors, err := pki.ParseCerts([]byte(cm.Data[identitycmd.AnchorsBundleKey]))
	if err != nil {
		return fail(title, hint, "ConfigMap %s/%s %s: %v", Namespace, identitycmd.AnchorsConfigMap, identitycmd.AnchorsBundleKey, err)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, a := range anchors {
		roots.AddCert(a)
	}
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fail(title, "the issuer must be signed by an anchor in the ConfigMap: re-create both together", "issuer %q does not chain to %s: %v", cert.Subject.CommonName, identitycmd.AnchorsConfigMap, err)
	}
	if left := cert.NotAfter.Sub(now); left < IssuerWarnLeft {
		return Result{Name: title, Status: Warn, Detail: fmt.Sprintf("issuer %q expires in %s (%s)", cert.Subject.CommonName, left.Round(time.Hour), cert.NotAfter.UTC().Format(time.RFC3339)), Hint: hint}
	}
	return ok(title)
}

func (c Checker) clock(ctx context.Context) Result {
	title := "clock of this machine agrees with the API server"
	hint := "synchronise the clocks (NTP); certificates are backdated by only one minute"
	server, local, err := c.ServerTime(ctx)
	if err != nil {
		return fail(title, "check access to the cluster", "reading the API server's time: %v", err)
	}
	// The Date header has one-second resolution.
	skew := server.Sub(local).Abs() - time.Second
	if skew < 0 {
		skew = 0
	}
	switch {
	case skew > MaxClockSkew:
		return fail(title, hint, "clocks differ by %s (more than %s)", skew.Round(time.Second), MaxClockSkew)
	case skew > WarnClockSkew:
		return Result{Name: title, Status: Warn, Detail: fmt.Sprintf("clocks differ by %s", skew.Round(time.Second)), Hint: hint}
	}
	return ok(title)
}

// Print writes one line per result (✔, ‼ for a warning, ✘) and the hint
// under a failure or warning; colour adds green/yellow/red. It returns
// whether every check passed (warnings pass).
func Print(w io.Writer, rs []Result, colour bool) bool {
	passed := true
	paint := func(code, s string) string {
		if !colour {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	for _, r := range rs {
		mark := paint(statusColours[r.Status.known()], r.Status.Symbol())
		if r.Status == OK {
			fmt.Fprintf(w, "%s %s\n", mark, r.Name)
			continue
		}
		passed = passed && r.Status == Warn
		fmt.Fprintf(w, "%s %s: %s\n", mark, r.Name, r.Detail)
		if r.Hint != "" {
			fmt.Fprintf(w, "    hint: %s\n", r.Hint)
		}
	}
	status := "all checks passed"
	if !passed {
		status = "some checks failed"
	}
	fmt.Fprintf(w, "\nStatus: %s\n", status)
	return passed
}

// APIServerTime is the production Checker.ServerTime: a GET of /version
// with cfg's credentials, reading the response's Date header.
func APIServerTime(cfg *rest.Config) func(ctx context.Context) (server, local time.Time, err error) {
	return func(ctx context.Context) (time.Time, time.Time, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("HTTP client for the API server: %w", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/version", nil)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("request to %s: %w", cfg.Host, err)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("GET %s/version: %w", cfg.Host, err)
		}
		end := time.Now()
		resp.Body.Close()
		server, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("the API server's Date header %q: %w", resp.Header.Get("Date"), err)
		}
		return server, start.Add(end.Sub(start) / 2), nil
	}
}
