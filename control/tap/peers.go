package tap

import (
	"context"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/api/tapapi"
	"github.com/plexus-mesh/plexus/control/meshpod"
)

// peerCache names the pods behind the addresses in events, for a while.
type peerCache struct {
	kube kubernetes.Interface
	mu   sync.Mutex
	m    map[netip.Addr]peerEntry
}

type peerEntry struct {
	peer    tapapi.Peer // Addr unset
	expires time.Time
}

// Bounds of the cache and its lookups.
const (
	peerTTL     = 30 * time.Second
	peerMax     = 10_000
	peerTimeout = 2 * time.Second
)

func newPeerCache(kube kubernetes.Interface) *peerCache {
	return &peerCache{kube: kube, m: map[netip.Addr]peerEntry{}}
}

// peer describes addr (IP or IP:port) and the identity it proved.
func (c *peerCache) peer(ctx context.Context, addr, identity string) tapapi.Peer {
	p := tapapi.Peer{Addr: addr, Identity: identity}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return p
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap()
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[ip]
	c.mu.Unlock()
	if !ok || now.After(e.expires) {
		e = peerEntry{peer: c.lookup(ctx, ip), expires: now.Add(peerTTL)}
		c.mu.Lock()
		if len(c.m) >= peerMax {
			clear(c.m)
		}
		c.m[ip] = e
		c.mu.Unlock()
	}
	q := e.peer
	q.Addr, q.Identity = addr, identity
	return q
}

// lookup finds the pod with IP ip; an empty Peer when none (or the API
// server does not answer in time).
func (c *peerCache) lookup(ctx context.Context, ip netip.Addr) tapapi.Peer {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	list, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + ip.String()})
	if err != nil {
		return tapapi.Peer{}
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.HostNetwork || p.Status.Phase != "Running" {
			continue
		}
		kind, name := meshpod.Workload(p)
		return tapapi.Peer{Namespace: p.Namespace, Pod: p.Name, WorkloadKind: kind, WorkloadName: name}
	}
	return tapapi.Peer{}
}
