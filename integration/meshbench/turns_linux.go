package meshbench

import (
	"fmt"
	"net/http"
)

// takeTurns sets the plexus path up to take turns with a plexus-before
// path that runs cfg.BaselineBin: both pairs need the proxy's ports and
// redirect rules, so each runs only during its own cells.
func takeTurns(cfg Config, topo *Topology, paths []*path) []*path {
	pair := func(bin string) func() ([]*Sidecar, error) {
		return func() ([]*Sidecar, error) {
			return startPair(func(netns string) (*Sidecar, error) { return StartPlexus(bin, netns, cfg.LogDir) }, topo)
		}
	}
	var out []*path
	for _, p := range paths {
		out = append(out, p)
		if p.name == "plexus" {
			p.start = pair(cfg.ProxyBin)
			out = append(out, &path{name: "plexus-before", port: portPlexus, start: pair(cfg.BaselineBin)})
		}
	}
	return out
}

// turnsNote says which binary each plexus path ran and how they shared
// the ports.
func turnsNote(cfg Config) string {
	return fmt.Sprintf("plexus is `%s`, plexus-before is `%s`. The two pairs take turns on the same ports: "+
		"each is started for its own cell (warm-up included) and stopped after it, plexus first at the 1st, 3rd, … rate "+
		"and plexus-before first at the others (saturation continues the alternation); "+
		"their memory is read just before each stop.", cfg.ProxyBin, cfg.BaselineBin)
}

// in runs fn with p's pair up. A pair taking turns is started for fn and
// stopped after it; any other path's sidecars run throughout.
func (p *path) in(client *http.Client, fn func() error) error {
	if p.start == nil {
		return fn()
	}
	pair, err := p.start()
	if err != nil {
		return fmt.Errorf("starting the %s pair: %w", p.name, err)
	}
	p.sidecars = pair
	err = fn()
	p.last = usageOf(pair)
	client.CloseIdleConnections() // they lead to this pair, which is going
	stopAll(pair)
	p.sidecars = nil
	return err
}

// order is the order the paths run in at the i-th rate: as listed, except
// that the two pairs taking turns swap places at every other rate, so
// neither always runs first.
func order(paths []*path, i int) []int {
	var idx, turns []int
	for j, p := range paths {
		idx = append(idx, j)
		if p.start != nil {
			turns = append(turns, j)
		}
	}
	if i%2 == 1 && len(turns) == 2 {
		idx[turns[0]], idx[turns[1]] = turns[1], turns[0]
	}
	return idx
}
