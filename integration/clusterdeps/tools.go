//go:build tools

// Package clusterdeps pins what integration/cluster/deps.sh builds from
// this module besides cmd/coredns: Prometheus and promtool.
package clusterdeps

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
