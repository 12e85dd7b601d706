package mccli

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// GatewayService is the gateway's Service in the extension's namespace
// (deploy/plexus-multicluster/gateway.yaml).
const GatewayService = "plexus-gateway"

// gatewayAddress is where the linking cluster's pods reach the remote's
// gateway: its Service's load-balancer address, else a node's internal
// address and the node port; "" when the remote has no gateway Service.
func gatewayAddress(ctx context.Context, remote kubernetes.Interface) (string, error) {
	svc, err := remote.CoreV1().Services(mc.Namespace).Get(ctx, GatewayService, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the gateway's Service %s/%s: %w", mc.Namespace, GatewayService, err)
	case len(svc.Spec.Ports) == 0:
		return "", fmt.Errorf("the gateway's Service %s/%s has no port", mc.Namespace, GatewayService)
	}
	port := svc.Spec.Ports[0]
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			return netip.AddrPortFrom(ip, uint16(port.Port)).String(), nil
		}
	}
	if port.NodePort == 0 {
		return "", fmt.Errorf("the gateway's Service %s/%s has no load-balancer address nor node port: give --gateway-address", mc.Namespace, GatewayService)
	}
	nodes, err := remote.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing nodes for the gateway's address (or give --gateway-address): %w", err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ready(n) {
				return netip.AddrPortFrom(ip, uint16(port.NodePort)).String(), nil
			}
		}
	}
	return "", fmt.Errorf("no ready node with an internal address for the gateway's node port: give --gateway-address")
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
