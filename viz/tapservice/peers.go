package tapservice

import (
	"context"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// peerCache names the pods behind the addresses in events, for a while.
type peerCache struct {
	kube kubernetes.Interface
	mu   sync.Mutex
	m    map[netip.Addr]peerEntry
	// pending holds the lookups under way: concurrent misses on one
	// address wait for one List.
	pending map[netip.Addr]chan struct{}
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
	return &peerCache{kube: kube, m: map[netip.Addr]peerEntry{}, pending: map[netip.Addr]chan struct{}{}}
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
	q := c.get(ctx, ip)
	q.Addr, q.Identity = addr, identity
	return q
}

// get returns the cached peer of ip, looking it up (once, whoever asks
// meanwhile) when it is missing or stale.
func (c *peerCache) get(ctx context.Context, ip netip.Addr) tapapi.Peer {
	for {
		c.mu.Lock()
		if e, ok := c.m[ip]; ok && time.Now().Before(e.expires) {
			c.mu.Unlock()
			return e.peer
		}
		if wait, ok := c.pending[ip]; ok {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return tapapi.Peer{}
			}
		}
		done := make(chan struct{})
		c.pending[ip] = done
		c.mu.Unlock()

		p := c.lookup(ctx, ip)
		c.mu.Lock()
		if len(c.m) >= peerMax {
			clear(c.m)
		}
		c.m[ip] = peerEntry{peer: p, expires: time.Now().Add(peerTTL)}
		delete(c.pending, ip)
		c.mu.Unlock()
		close(done)
		return p
	}
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
