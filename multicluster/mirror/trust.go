package mirror

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/multicluster/trust"
)

// DefaultTrustRecheck is how often a Link's anchors are compared again
// (an anchor rotation in either cluster changes them).
const DefaultTrustRecheck = 5 * time.Minute

// trustState is what comparing a Link's two bundles of anchors found.
type trustState struct {
	// refused: no anchor in common, a Link whose proxies cannot verify
	// each other; unknown: a bundle could not be read (not refused).
	refused, unknown bool
	message          string
	// withdrawn: the refused Link's mirrors were deleted since this
	// check (again after each recheck, not on every sync).
	withdrawn bool
}

// checkTrust compares, when due, the anchors this cluster's proxies hold
// with those of Link l's cluster, read through its credentials (r's
// client). A Link that becomes trusted again has its Services mirrored
// anew.
func (c *Controller) checkTrust(ctx context.Context, l *mc.Link, r *remote, now time.Time) {
	if !r.trustAt.IsZero() && now.Sub(r.trustAt) < c.TrustRecheck {
		return
	}
	c.queue.AddAfter(item{link: l.Name}, c.TrustRecheck)
	was := r.trust
	r.trustAt = now
	ours, err := trust.Anchors(ctx, c.kube)
	if err != nil {
		r.trust = trustState{unknown: true, message: "this cluster: " + err.Error()}
		return
	}
	theirs, err := trust.Anchors(ctx, r.client)
	if err != nil {
		r.trust = trustState{unknown: true, message: fmt.Sprintf("cluster %s: %v", l.Spec.ClusterName, err)}
		return
	}
	if !trust.Common(ours, theirs) {
		r.trust = trustState{refused: true, message: fmt.Sprintf("no anchor in common: this cluster's proxies trust %s, cluster %s's trust %s; "+
			"they cannot verify each other, so nothing is mirrored", trust.Describe(ours), l.Spec.ClusterName, trust.Describe(theirs))}
		if !was.refused {
			c.log.Warn("Link refused: no common trust anchor", "link", l.Name, "detail", r.trust.message)
		}
		return
	}
	r.trust = trustState{}
	if was.refused {
		// Mirror again what the refusal held back.
		svcs, _ := r.services.List(labels.Everything())
		for _, s := range svcs {
			c.queue.Add(item{link: l.Name, ns: s.Namespace, name: s.Name})
		}
	}
}
