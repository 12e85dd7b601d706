//go:build tools

// Package flannel pins flanneld, which the local cluster builds for
// make cluster-up CNI=flannel.
package flannel

import _ "github.com/flannel-io/flannel"
