package tapservice

import (
	"context"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// peerCache names the pods behind the addresses in events, for a while.
type peerCache struct {
	kube kubernetes.Interface
	// trustDomain is this cluster's: an identity of another names a
	// linked cluster's peer, whose address is not this cluster's pods'.
	trustDomain string
	mu          sync.Mutex
	m           map[netip.Addr]peerEntry
	// pending holds the lookups under way: concurrent misses on one
	// address wait for one List.
	pending map[netip.Addr]chan struct{}
}

type peerEntry struct {
	peer           tapapi.Peer // Addr unset
	serviceAccount string      // the pod's, to check a proven identity against
	expires        time.Time
}

// Bounds of the cache and its lookups.
const (
	peerTTL     = 30 * time.Second
	peerMax     = 10_000
	peerTimeout = 2 * time.Second
)

func newPeerCache(kube kubernetes.Interface, trustDomain string) *peerCache {
	return &peerCache{kube: kube, trustDomain: trustDomain, m: map[netip.Addr]peerEntry{}, pending: map[netip.Addr]chan struct{}{}}
}

// peer describes addr (IP or IP:port) and the identity it proved. A peer
// is named by its identity, not its address, when the two disagree:
//   - an identity of another trust domain is a linked cluster's workload
//     (Cluster), whatever pod of this cluster may hold its address;
//   - an identity that is not the service account of the pod at addr
//     came through that pod (a multicluster gateway passing TLS through),
//     or from a pod this cluster does not know (a linked cluster's of the
//     same trust domain): the peer is the identity's, not the relay's.
func (c *peerCache) peer(ctx context.Context, addr, identity string) tapapi.Peer {
	p := tapapi.Peer{Addr: addr, Identity: identity}
	id, idErr := spiffe.Parse(identity)
	byIdentity := func() tapapi.Peer {
		p.Namespace, p.WorkloadKind, p.WorkloadName = id.Namespace, tapapi.KindServiceAccount, id.ServiceAccount
		return p
	}
	if idErr == nil && id.TrustDomain != c.trustDomain {
		p.Cluster = id.TrustDomain
		return byIdentity()
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return p
		}
		ip = ap.Addr()
	}
	e := c.get(ctx, ip.Unmap())
	if idErr == nil && (e.peer.Namespace != id.Namespace || e.serviceAccount != id.ServiceAccount) {
		return byIdentity()
	}
	q := e.peer
	q.Addr, q.Identity = addr, identity
	return q
}

// get returns the cached peer of ip, looking it up (once, whoever asks
// meanwhile) when it is missing or stale.
func (c *peerCache) get(ctx context.Context, ip netip.Addr) peerEntry {
	for {
		c.mu.Lock()
		if e, ok := c.m[ip]; ok && time.Now().Before(e.expires) {
			c.mu.Unlock()
			return e
		}
		if wait, ok := c.pending[ip]; ok {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return peerEntry{}
			}
		}
		done := make(chan struct{})
		c.pending[ip] = done
		c.mu.Unlock()

		e := c.lookup(ctx, ip)
		e.expires = time.Now().Add(peerTTL)
		c.mu.Lock()
		if len(c.m) >= peerMax {
			clear(c.m)
		}
		c.m[ip] = e
		delete(c.pending, ip)
		c.mu.Unlock()
		close(done)
		return e
	}
}

// lookup finds the pod with IP ip; an empty entry when none (or the API
// server does not answer in time). expires is unset.
func (c *peerCache) lookup(ctx context.Context, ip netip.Addr) peerEntry {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	list, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + ip.String()})
	if err != nil {
		return peerEntry{}
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.HostNetwork || p.Status.Phase != "Running" {
			continue
		}
		kind, name := meshpod.Workload(p)
		return peerEntry{peer: tapapi.Peer{Namespace: p.Namespace, Pod: p.Name, WorkloadKind: kind, WorkloadName: name}, serviceAccount: serviceAccount(p)}
	}
	return peerEntry{}
}
