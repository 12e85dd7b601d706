package plugin

import "github.com/plexus-mesh/plexus/cni-plugin/rules"

// Preparer is implemented by Tables that can get ready for Apply while the
// pod is being looked up (NetnsTables starts iptables-restore early). ADD
// calls Prepare once, just before the pod GET, with the families it will
// apply, and Release when it is done, whether or not it applied anything.
type Preparer interface {
	Prepare(netns string, fams []rules.Family)
	Release()
}
