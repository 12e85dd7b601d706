package vizcli

// plexusctl stat's measurement from the proxies, and its -l, shared by the
// core's stat and plexusctl viz stat.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// ScrapeStat is plexusctl stat's measurement, over every namespace when
// cfg.Namespace is "" (for deployments and pods): the namespaces are
// measured at once, and a name found in none of them is an error.
func ScrapeStat(ctx context.Context, kube kubernetes.Interface, cfg stat.Config, window time.Duration) ([]stat.Row, error) {
	if window == 0 {
		window = 5 * time.Second
	}
	cfg.Window = window
	s := stat.Stat{Client: kube, Scrape: stat.ProxyScraper(kube), Sleep: stat.Sleep, Now: time.Now}
	if cfg.Resource == stat.Namespaces || cfg.Namespace != "" {
		if err := cfg.Validate(); err != nil {
			return nil, command.UsageError{Err: err}
		}
		return s.Run(ctx, cfg)
	}
	probe := cfg
	probe.Namespace = "all"
	if err := probe.Validate(); err != nil {
		return nil, command.UsageError{Err: err}
	}
	nss, err := Select(ctx, kube, Namespaces, "", "")
	if err != nil {
		return nil, err
	}
	rows := make([][]stat.Row, len(nss))
	errs := make([]error, len(nss))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, n := range nss {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			one := cfg
			one.Namespace = n.Name
			rows[i], errs[i] = s.Run(ctx, one)
		})
	}
	wg.Wait()
	var all []stat.Row
	for i := range nss {
		if errs[i] != nil && !(cfg.Name != "" && errors.Is(errs[i], stat.ErrNotFound)) {
			return nil, errs[i]
		}
		all = append(all, rows[i]...)
	}
	if cfg.Name != "" && len(all) == 0 {
		return nil, fmt.Errorf("%s %s %w in any namespace", cfg.Resource, cfg.Name, stat.ErrNotFound)
	}
	return all, nil
}

// SelectRows keeps the rows of objects whose labels match selector.
func SelectRows(ctx context.Context, kube kubernetes.Interface, res stat.Resource, ns, selector string, rows []stat.Row) ([]stat.Row, error) {
	if _, err := labels.Parse(selector); err != nil {
		return nil, command.Usagef("-l %q: %v", selector, err)
	}
	kind := map[stat.Resource]Kind{stat.Namespaces: Namespaces, stat.Deployments: Deployments, stat.Pods: Pods}[res]
	objs, err := Select(ctx, kube, kind, ns, selector)
	if err != nil {
		return nil, err
	}
	keep := map[Object]bool{}
	for _, o := range objs {
		keep[o] = true
	}
	out := rows[:0]
	for _, r := range rows {
		o := Object{Namespace: r.Namespace, Name: r.Name}
		if keep[o] {
			out = append(out, r)
		}
	}
	return out, nil
}
