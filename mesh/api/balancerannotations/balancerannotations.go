// Package balancerannotations is the contract for the failure-accrual
// (circuit breaking) annotations on a Service (ARCHITECTURE.md §8): their names,
// their syntax and their defaults. It imports only the standard library,
// so the proxy and the control plane can share it.
package balancerannotations

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The failure-accrual annotations of a Service, named as Linkerd's
// balancer.linkerd.io ones.
const (
	AnnotationFailureAccrual    = "balancer.plexus.dev/failure-accrual"
	AnnotationMaxFailures       = "balancer.plexus.dev/failure-accrual-consecutive-max-failures"
	AnnotationMinPenalty        = "balancer.plexus.dev/failure-accrual-consecutive-min-penalty"
	AnnotationMaxPenalty        = "balancer.plexus.dev/failure-accrual-consecutive-max-penalty"
	AnnotationJitterRatio       = "balancer.plexus.dev/failure-accrual-consecutive-jitter-ratio"
	AnnotationMinHealthyPercent = "balancer.plexus.dev/min-healthy-percent"
	// AnnotationZoneAware turns zone-aware balancing on ("true") or off
	// ("false") for a Service's clients, whatever its trafficDistribution.
	AnnotationZoneAware = "balancer.plexus.dev/zone-aware"
)

// TrafficDistributionPreferClose is the Service spec.trafficDistribution
// value (Kubernetes 1.31+) that turns zone-aware balancing on when
// AnnotationZoneAware is not set.
const TrafficDistributionPreferClose = "PreferClose"

// AccrualConsecutive is the one value of AnnotationFailureAccrual: it
// turns consecutive-failure accrual on.
const AccrualConsecutive = "consecutive"

// Accrual is consecutive-failure accrual as a Service's annotations set
// it, every field filled in (see Defaults).
type Accrual struct {
	// ConsecutiveFailures is N: the N-th failure in a row ejects an
	// endpoint.
	ConsecutiveFailures int
	// MinPenalty is the first ejection's penalty, doubled on each
	// ejection in a row up to MaxPenalty.
	MinPenalty, MaxPenalty time.Duration
	// JitterRatio J in [0, 1] spreads each penalty by ±J/2.
	JitterRatio float64
	// MinHealthyPercent in [0, 100]: an ejection never leaves fewer than
	// this percent of the endpoints in.
	MinHealthyPercent int
}

// Defaults returns the values of an annotation that is not set
// (ARCHITECTURE.md §8): 7 failures, penalty 1s to 1m, jitter 0.5, floor 50 %.
// They are defined here and nowhere else.
func Defaults() Accrual {
	return Accrual{
		ConsecutiveFailures: 7,
		MinPenalty:          time.Second,
		MaxPenalty:          time.Minute,
		JitterRatio:         0.5,
		MinHealthyPercent:   50,
	}
}

// ParseAccrual reads the failure-accrual annotations of a Service (others
// are ignored). enabled is whether AnnotationFailureAccrual is
// "consecutive"; the other annotations are parsed whether or not it is.
// Every malformed value is an error naming the annotation and the value,
// all joined; such a value is left at its default, as are both penalties
// when the min exceeds the max. So the Accrual returned always holds
// ConsecutiveFailures ≥ 1, 0 < MinPenalty ≤ MaxPenalty, JitterRatio in
// [0, 1] and MinHealthyPercent in [0, 100]. Values: max-failures an
// integer ≥ 1; penalties Go durations > 0 (500ms, 10s, 1m); jitter-ratio a
// number in [0, 1]; min-healthy-percent an integer in [0, 100], a
// trailing % allowed.
func ParseAccrual(annotations map[string]string) (a Accrual, enabled bool, err error) {
	a = Defaults()
	var errs []error
	get := func(name string, parse func(string) error) bool {
		raw, ok := annotations[name]
		if !ok {
			return false
		}
		if err := parse(strings.TrimSpace(raw)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q %w", name, raw, err))
			return false
		}
		return true
	}
	get(AnnotationFailureAccrual, func(s string) error {
		if s != AccrualConsecutive {
			return errors.New(`is not "consecutive"`)
		}
		enabled = true
		return nil
	})
	get(AnnotationMaxFailures, func(s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 1 {
			return errors.New("is not an integer of at least 1")
		}
		a.ConsecutiveFailures = int(n)
		return nil
	})
	minSet := get(AnnotationMinPenalty, durationInto(&a.MinPenalty))
	maxSet := get(AnnotationMaxPenalty, durationInto(&a.MaxPenalty))
	if a.MinPenalty > a.MaxPenalty { // only a value set can do this
		minRaw, maxRaw := annotations[AnnotationMinPenalty], annotations[AnnotationMaxPenalty]
		switch {
		case minSet && maxSet:
			errs = append(errs, fmt.Errorf("%s: %q is above %s: %q", AnnotationMinPenalty, minRaw, AnnotationMaxPenalty, maxRaw))
		case minSet:
			errs = append(errs, fmt.Errorf("%s: %q is above the default max penalty %s", AnnotationMinPenalty, minRaw, a.MaxPenalty))
		default:
			errs = append(errs, fmt.Errorf("%s: %q is below the default min penalty %s", AnnotationMaxPenalty, maxRaw, a.MinPenalty))
		}
		d := Defaults()
		a.MinPenalty, a.MaxPenalty = d.MinPenalty, d.MaxPenalty
	}
	get(AnnotationJitterRatio, func(s string) error {
		j, err := strconv.ParseFloat(s, 64)
		if err != nil || !(j >= 0 && j <= 1) {
			return errors.New("is not a number in [0, 1]")
		}
		a.JitterRatio = j
		return nil
	})
	get(AnnotationMinHealthyPercent, func(s string) error {
		n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
		if err != nil || n < 0 || n > 100 {
			return errors.New("is not an integer percentage in [0, 100]")
		}
		a.MinHealthyPercent = n
		return nil
	})
	return a, enabled, errors.Join(errs...)
}

// durationInto returns a parser that stores a positive Go duration in d.
func durationInto(d *time.Duration) func(string) error {
	return func(s string) error {
		v, err := time.ParseDuration(s)
		if err != nil || v <= 0 {
			return errors.New("is not a positive duration (like 500ms or 10s)")
		}
		*d = v
		return nil
	}
}

// ParseZoneAware reads whether a Service with these annotations and
// spec.trafficDistribution (nil or "" when unset) asks for zone-aware
// balancing: AnnotationZoneAware when set ("true" or "false"), else
// whether trafficDistribution is PreferClose. A malformed annotation is
// an error naming it, and counts as unset.
func ParseZoneAware(annotations map[string]string, trafficDistribution *string) (bool, error) {
	preferClose := trafficDistribution != nil && *trafficDistribution == TrafficDistributionPreferClose
	raw, ok := annotations[AnnotationZoneAware]
	if !ok {
		return preferClose, nil
	}
	switch strings.TrimSpace(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return preferClose, fmt.Errorf("%s: %q is not \"true\" or \"false\"", AnnotationZoneAware, raw)
}
