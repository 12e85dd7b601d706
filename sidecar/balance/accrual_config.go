package balance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The failure-accrual annotations of a Service (DESIGN.md §8), named as
// Linkerd's balancer.linkerd.io ones.
const (
	AnnotationFailureAccrual    = "balancer.plexus.dev/failure-accrual"
	AnnotationMaxFailures       = "balancer.plexus.dev/failure-accrual-consecutive-max-failures"
	AnnotationMinPenalty        = "balancer.plexus.dev/failure-accrual-consecutive-min-penalty"
	AnnotationMaxPenalty        = "balancer.plexus.dev/failure-accrual-consecutive-max-penalty"
	AnnotationJitterRatio       = "balancer.plexus.dev/failure-accrual-consecutive-jitter-ratio"
	AnnotationMinHealthyPercent = "balancer.plexus.dev/min-healthy-percent"
)

// AccrualConsecutive is the one value of AnnotationFailureAccrual: it
// turns consecutive-failure accrual on.
const AccrualConsecutive = "consecutive"

// AccrualConfig configures failure accrual over one balancer's endpoints.
// Unlike Config, zero fields are values, not defaults: start from
// DefaultAccrualConfig.
type AccrualConfig struct {
	// ConsecutiveFailures is N: the N-th failure in a row ejects.
	ConsecutiveFailures int
	// MinPenalty is the first ejection's penalty; each ejection of an
	// endpoint that has not been restored in between doubles it, up to
	// MaxPenalty (before jitter, see Penalty).
	MinPenalty, MaxPenalty time.Duration
	// JitterRatio J in [0, 1] spreads each penalty uniformly over
	// [base·(1−J/2), base·(1+J/2)).
	JitterRatio float64
	// MinHealthyPercent in [0, 100] is the floor: never more than
	// ⌊n·(100−MinHealthyPercent)/100⌋ of n endpoints are out at once.
	MinHealthyPercent int
}

// DefaultAccrualConfig returns the defaults of DESIGN.md §8: 7 failures,
// penalty 1s to 1m, jitter 0.5, floor 50 %.
func DefaultAccrualConfig() AccrualConfig {
	return AccrualConfig{
		ConsecutiveFailures: 7,
		MinPenalty:          time.Second,
		MaxPenalty:          time.Minute,
		JitterRatio:         0.5,
		MinHealthyPercent:   50,
	}
}

// Validate reports the first problem with c.
func (c AccrualConfig) Validate() error {
	switch {
	case c.ConsecutiveFailures < 1:
		return fmt.Errorf("balance: consecutive failures %d must be at least 1", c.ConsecutiveFailures)
	case c.MinPenalty <= 0:
		return fmt.Errorf("balance: min penalty %s must be positive", c.MinPenalty)
	case c.MaxPenalty < c.MinPenalty:
		return fmt.Errorf("balance: max penalty %s must not be below min penalty %s", c.MaxPenalty, c.MinPenalty)
	case !(c.JitterRatio >= 0 && c.JitterRatio <= 1): // also NaN
		return fmt.Errorf("balance: jitter ratio %v must be in [0, 1]", c.JitterRatio)
	case c.MinHealthyPercent < 0 || c.MinHealthyPercent > 100:
		return fmt.Errorf("balance: min healthy percent %d must be in [0, 100]", c.MinHealthyPercent)
	}
	return nil
}

// Penalty is the length of an endpoint's k-th ejection in a row (k ≥ 1)
// with rnd a uniformly random word: the base min(MaxPenalty,
// MinPenalty·2^(k−1)) times 1 + J·(u − ½), u = the top 53 bits of rnd as a
// fraction in [0, 1). So the penalty lies in [base·(1−J/2), base·(1+J/2)),
// and with the default J = 0.5 in [0.75·base, 1.25·base): jitter may take
// a capped penalty up to MaxPenalty·(1+J/2). It is at least 1ns.
func (c AccrualConfig) Penalty(k int, rnd uint64) time.Duration {
	base := c.MaxPenalty
	if k < 1 {
		k = 1
	}
	if k-1 < 63 && c.MinPenalty <= c.MaxPenalty>>(k-1) {
		base = min(c.MinPenalty<<(k-1), c.MaxPenalty)
	}
	u := float64(rnd>>11) / (1 << 53)
	return max(time.Duration(float64(base)*(1+c.JitterRatio*(u-0.5))), 1)
}

// maxOut is how many of n endpoints may be out at once.
func (c AccrualConfig) maxOut(n int64) int64 {
	return n * int64(100-c.MinHealthyPercent) / 100
}

// ParseAccrual reads the failure-accrual annotations of a Service (others
// are ignored). enabled is whether AnnotationFailureAccrual is
// "consecutive"; the other annotations are parsed whether or not it is.
// Every malformed value is an error naming the annotation and the value,
// all joined; such a value is left at its default, as are both penalties
// when the min exceeds the max, so the config returned always passes
// Validate. Values: max-failures an integer ≥ 1; penalties Go durations
// > 0 (500ms, 10s, 1m); jitter-ratio a number in [0, 1];
// min-healthy-percent an integer in [0, 100], a trailing % allowed.
func ParseAccrual(annotations map[string]string) (c AccrualConfig, enabled bool, err error) {
	c = DefaultAccrualConfig()
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
		c.ConsecutiveFailures = int(n)
		return nil
	})
	minSet := get(AnnotationMinPenalty, durationInto(&c.MinPenalty))
	maxSet := get(AnnotationMaxPenalty, durationInto(&c.MaxPenalty))
	if c.MinPenalty > c.MaxPenalty { // only a value set can do this
		minRaw, maxRaw := annotations[AnnotationMinPenalty], annotations[AnnotationMaxPenalty]
		switch {
		case minSet && maxSet:
			errs = append(errs, fmt.Errorf("%s: %q is above %s: %q", AnnotationMinPenalty, minRaw, AnnotationMaxPenalty, maxRaw))
		case minSet:
			errs = append(errs, fmt.Errorf("%s: %q is above the default max penalty %s", AnnotationMinPenalty, minRaw, c.MaxPenalty))
		default:
			errs = append(errs, fmt.Errorf("%s: %q is below the default min penalty %s", AnnotationMaxPenalty, maxRaw, c.MinPenalty))
		}
		d := DefaultAccrualConfig()
		c.MinPenalty, c.MaxPenalty = d.MinPenalty, d.MaxPenalty
	}
	get(AnnotationJitterRatio, func(s string) error {
		j, err := strconv.ParseFloat(s, 64)
		if err != nil || !(j >= 0 && j <= 1) {
			return errors.New("is not a number in [0, 1]")
		}
		c.JitterRatio = j
		return nil
	})
	get(AnnotationMinHealthyPercent, func(s string) error {
		n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
		if err != nil || n < 0 || n > 100 {
			return errors.New("is not an integer percentage in [0, 100]")
		}
		c.MinHealthyPercent = n
		return nil
	})
	return c, enabled, errors.Join(errs...)
}

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

// IsFailureStatus reports whether a response counts as a failure for
// accrual: an HTTP status 500–599, or a gRPC status UNAVAILABLE (14),
// INTERNAL (13), DATA_LOSS (15) or DEADLINE_EXCEEDED (4). httpStatus 0 is
// no HTTP status; grpcStatus is the grpc-status value (the number) or the
// code's name (UNAVAILABLE or unavailable, DATA_LOSS or data-loss), ""
// for none. A connection error, or any failure with no response, is a
// failure the caller reports without asking. It allocates nothing.
func IsFailureStatus(httpStatus int, grpcStatus string) bool {
	if httpStatus >= 500 && httpStatus <= 599 {
		return true
	}
	switch grpcStatus {
	case "":
		return false
	case "4", "13", "14", "15":
		return true
	}
	for _, name := range [...]string{"UNAVAILABLE", "INTERNAL", "DATA_LOSS", "DEADLINE_EXCEEDED", "data-loss", "deadline-exceeded"} {
		if strings.EqualFold(grpcStatus, name) {
			return true
		}
	}
	return false
}
