package mccli

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/multicluster/trust"
)

// Checker checks the extension in the linking cluster: the Link CRD and
// the service mirror, each Link's conditions and mirrors, and, through
// each Link's own credentials, that the linked cluster's proxies trust an
// anchor this cluster's do (the anchors each install hands its proxies,
// not a configured value).
type Checker struct {
	Local   kubernetes.Interface
	Dynamic dynamic.Interface
	// NewRemote builds a linked cluster's client from its kubeconfig.
	NewRemote func(kubeconfig []byte) (kubernetes.Interface, error)
}

// Run runs every check.
func (c Checker) Run(ctx context.Context) []healthcheck.Result {
	var rs []healthcheck.Result
	list, err := c.Dynamic.Resource(mc.LinkResource).Namespace(mc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(rs, fail("the Link resource is served", fmt.Sprintf("listing Links: %v", err),
			"install the extension: plexusctl multicluster install | kubectl apply -f -"))
	}
	rs = append(rs, ok("the Link resource is served"))
	rs = append(rs, c.mirrorRunning(ctx))
	localAnchors, localErr := trust.Anchors(ctx, c.Local)
	for i := range list.Items {
		l, err := mc.DecodeLink(&list.Items[i])
		if err != nil {
			rs = append(rs, fail("Link "+list.Items[i].GetName(), err.Error(), ""))
			continue
		}
		rs = append(rs, linkResults(l)...)
		rs = append(rs, c.anchors(ctx, l, localAnchors, localErr))
	}
	return append(rs, c.federated(ctx)...)
}

// federated names each federated Service here and the clusters it spans
// (this one while its own Service is exported so, and the service
// mirror's FederatedClustersAnnotation), as passing results: what
// exists, for the reader.
func (c Checker) federated(ctx context.Context) []healthcheck.Result {
	list, err := c.Local.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: mc.FederatedLabel})
	if err != nil {
		return []healthcheck.Result{fail("the federated Services are listed", err.Error(), "")}
	}
	var rs []healthcheck.Result
	for _, svc := range list.Items {
		var members []string
		local, err := c.Local.CoreV1().Services(svc.Namespace).Get(ctx, svc.Labels[mc.FederatedLabel], metav1.GetOptions{})
		if err == nil && local.Labels[mc.ExportedLabel] == mc.ExportedFederated {
			members = append(members, "this cluster")
		}
		if linked := svc.Annotations[mc.FederatedClustersAnnotation]; linked != "" {
			members = append(members, strings.Split(linked, ",")...)
		}
		rs = append(rs, ok(fmt.Sprintf("federated Service %s/%s spans %s", svc.Namespace, svc.Name, strings.Join(members, ", "))))
	}
	return rs
}

func (c Checker) mirrorRunning(ctx context.Context) healthcheck.Result {
	const name = "the service mirror is available"
	d, err := c.Local.AppsV1().Deployments(mc.Namespace).Get(ctx, "plexus-service-mirror", metav1.GetOptions{})
	switch {
	case err != nil:
		return fail(name, err.Error(), "install the extension: plexusctl multicluster install | kubectl apply -f -")
	case d.Status.AvailableReplicas < 1:
		return fail(name, fmt.Sprintf("deployment %s/plexus-service-mirror has no available replica", mc.Namespace),
			"kubectl -n "+mc.Namespace+" describe deployment plexus-service-mirror")
	}
	return ok(name)
}

// linkResults are Link l's conditions and every mirror not Mirrored.
func linkResults(l *mc.Link) []healthcheck.Result {
	name := fmt.Sprintf("Link %s (cluster %s) is ready", l.Name, l.Spec.ClusterName)
	var rs []healthcheck.Result
	ready := false
	for _, cond := range l.Status.Conditions {
		if cond.Type != mc.ConditionReady {
			continue
		}
		ready = true
		if cond.Status != metav1.ConditionTrue {
			rs = append(rs, fail(name, cond.Reason+": "+cond.Message, "kubectl -n "+mc.Namespace+" get link "+l.Name+" -o yaml"))
		} else if cond.ObservedGeneration != l.Generation {
			rs = append(rs, fail(name, "the service mirror has not seen the Link's last change", "is deployment "+mc.Namespace+"/plexus-service-mirror running?"))
		} else {
			rs = append(rs, ok(name))
		}
	}
	if !ready {
		rs = append(rs, fail(name, "no status yet", "is deployment "+mc.Namespace+"/plexus-service-mirror running?"))
	}
	for _, m := range l.Status.MirrorServices {
		for _, cond := range m.Conditions {
			if cond.Type == mc.ConditionMirrored && cond.Status != metav1.ConditionTrue {
				rs = append(rs, fail(fmt.Sprintf("Link %s: %s/%s is mirrored as %s", l.Name, m.RemoteRef.Namespace, m.RemoteRef.Name, m.LocalRef.Name),
					cond.Reason+": "+cond.Message, ""))
			}
		}
	}
	return rs
}

// anchors compares the anchors of this cluster with those of Link l's,
// read through the Link's credentials.
func (c Checker) anchors(ctx context.Context, l *mc.Link, local []*x509.Certificate, localErr error) healthcheck.Result {
	name := fmt.Sprintf("Link %s: both clusters trust a common anchor", l.Name)
	if localErr != nil {
		return fail(name, "this cluster: "+localErr.Error(), "")
	}
	secret, err := c.Local.CoreV1().Secrets(mc.Namespace).Get(ctx, l.Spec.CredentialsSecret, metav1.GetOptions{})
	if err != nil {
		return fail(name, "reading the Link's credentials: "+err.Error(), "")
	}
	remote, err := c.NewRemote(secret.Data[mc.CredentialsKey])
	if err != nil {
		return fail(name, "the Link's credentials: "+err.Error(), "")
	}
	theirs, err := trust.Anchors(ctx, remote)
	if err != nil {
		return fail(name, fmt.Sprintf("cluster %s: %v", l.Spec.ClusterName, err), "")
	}
	if trust.Common(local, theirs) {
		return ok(name)
	}
	return fail(name, fmt.Sprintf("no anchor in common: this cluster trusts %s, cluster %s trusts %s; their proxies cannot verify each other",
		trust.Describe(local), l.Spec.ClusterName, trust.Describe(theirs)),
		"install both clusters under one anchor (plexusctl install --identity-trust-anchors-file), or add the other's anchor to each bundle")
}

func ok(name string) healthcheck.Result {
	return healthcheck.Result{Name: name, Status: healthcheck.OK}
}

func fail(name, detail, hint string) healthcheck.Result {
	return healthcheck.Result{Name: name, Status: healthcheck.Fail, Detail: detail, Hint: hint}
}
