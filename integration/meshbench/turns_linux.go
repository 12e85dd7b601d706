package meshbench

import (
	"context"
	"fmt"
	"strings"
)

// isPlexus reports whether a pair runs plexus-proxy (either build).
func isPlexus(name string) bool { return strings.HasPrefix(name, "plexus") }

// turnsNote says which binary each plexus path ran and how they shared
// the ports.
func turnsNote(cfg Config) string {
	return fmt.Sprintf("plexus and plexus-mtls are `%s`, plexus-before and plexus-mtls-before are `%s`. Each build's pair takes turns with the other's on the same ports: "+
		"each is started for its own cell (warm-up included) and stopped after it, this build first at the 1st, 3rd, … rate "+
		"and the other first at the others (saturation continues the alternation); "+
		"their memory is read just before each stop.", cfg.ProxyBin, cfg.BaselineBin)
}

// in runs fn with a request function for p over connections opened for
// fn and closed after it. A pair taking turns is started for fn and
// stopped after it; any other pair runs throughout.
func (p *path) in(topo *Topology, workers int, fn func(do func(context.Context, int) error) error) error {
	if pr := p.pair; pr != nil && pr.start != nil {
		ss, err := pr.start()
		if err != nil {
			return fmt.Errorf("starting the %s pair: %w", pr.name, err)
		}
		pr.sidecars = ss
		defer func() {
			pr.last = usageOf(ss)
			stopAll(ss)
			pr.sidecars = nil
		}()
	}
	do, closeFn, err := p.proto.open(topo, p.port, workers)
	if err != nil {
		return err
	}
	defer closeFn()
	return fn(do)
}

// order is the order the paths run in at the i-th rate, as indexes into
// paths: as listed, except that a build and its -before build swap places
// at every other rate, so neither always runs first.
func order(paths []*path, i int) []int {
	out := make([]int, len(paths))
	for j := range out {
		out[j] = j
	}
	if i%2 == 0 {
		return out
	}
	for j := 0; j+1 < len(out); j++ {
		a, b := paths[j], paths[j+1]
		if b.name == a.name+"-before" && b.proto.name == a.proto.name {
			out[j], out[j+1] = j+1, j
			j++
		}
	}
	return out
}
