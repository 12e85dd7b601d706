package destination

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// DefaultStatusLease is the name of the Lease destination replicas elect
// the route status writer with.
const DefaultStatusLease = "plexus-destination-status"

// StatusLease is how destination replicas elect the one that writes route
// status (the others compute it and serve proxies, and write nothing). A
// zero Name turns election off: this replica writes, as one replica must.
type StatusLease struct {
	Namespace, Name string
	// Identity names this replica in the Lease (its pod's name).
	Identity string
	// Duration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings; zero: 15s, 10s and 2s, as Kubernetes' own
	// controllers. A leader that dies is replaced within Duration; one
	// that stops releases the Lease at once.
	Duration, RenewDeadline, RetryPeriod time.Duration
}

func (l StatusLease) validate() error {
	if l.Name == "" {
		return nil
	}
	var errs []error
	if l.Namespace == "" || l.Identity == "" {
		errs = append(errs, fmt.Errorf("status lease %q: needs a namespace and this replica's identity", l.Name))
	}
	d, renew, retry := l.timings()
	if !(retry < renew && renew < d) {
		errs = append(errs, fmt.Errorf("status lease %q: want retry period %v < renew deadline %v < duration %v", l.Name, retry, renew, d))
	}
	return errors.Join(errs...)
}

func (l StatusLease) timings() (d, renew, retry time.Duration) {
	d, renew, retry = l.Duration, l.RenewDeadline, l.RetryPeriod
	if d == 0 {
		d = 15 * time.Second
	}
	if renew == 0 {
		renew = 10 * time.Second
	}
	if retry == 0 {
		retry = 2 * time.Second
	}
	return d, renew, retry
}

// whileLeading runs lead while this replica holds the Lease, as often as
// it wins it, until ctx ends; with election off, it runs lead once. leading
// is told when leadership starts and ends.
func (l StatusLease) whileLeading(ctx context.Context, client kubernetes.Interface, log *slog.Logger, leading func(bool), lead func(context.Context)) {
	if l.Name == "" {
		leading(true)
		lead(ctx)
		return
	}
	d, renew, retry := l.timings()
	config := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: l.Identity},
		},
		LeaseDuration:   d,
		RenewDeadline:   renew,
		RetryPeriod:     retry,
		ReleaseOnCancel: true,
		Name:            l.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("writing route status: this replica holds the lease", "lease", l.Namespace+"/"+l.Name, "identity", l.Identity)
				leading(true)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				leading(false)
				if ctx.Err() == nil {
					log.Warn("lost the route status lease; another replica writes", "lease", l.Namespace+"/"+l.Name)
				}
			},
		},
	}
	for ctx.Err() == nil {
		// A new elector for each term: Run returns once leadership is
		// lost (or ctx ends), and an elector is not meant to run twice.
		elector, err := leaderelection.NewLeaderElector(config)
		if err != nil { // validate ruled the config's errors out
			log.Error("route status leader election", "err", err)
			return
		}
		elector.Run(ctx)
	}
}
