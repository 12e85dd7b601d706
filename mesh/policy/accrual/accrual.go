// Package accrual is the configuration of failure accrual: when a
// balancer ejects an endpoint that keeps failing, for how long, and how
// many it may eject at once. The control plane fills it from
// balancerannotations, routes compiles it, the proxy's balancer runs it.
package accrual

import (
	"fmt"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
)

// Config configures failure accrual over one balancer's endpoints.
// Unlike Config, zero fields are values, not defaults: start from
// DefaultConfig.
type Config struct {
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

// DefaultConfig returns the defaults of ARCHITECTURE.md §8 (7 failures,
// penalty 1s to 1m, jitter 0.5, floor 50 %), taken from
// mesh/api/balancerannotations.Defaults, where they are defined: the
// control plane fills every field of a policy's FailureAccrual from there.
func DefaultConfig() Config {
	d := balancerannotations.Defaults()
	return Config{
		ConsecutiveFailures: d.ConsecutiveFailures,
		MinPenalty:          d.MinPenalty,
		MaxPenalty:          d.MaxPenalty,
		JitterRatio:         d.JitterRatio,
		MinHealthyPercent:   d.MinHealthyPercent,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
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
func (c Config) Penalty(k int, rnd uint64) time.Duration {
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

// MaxOut is how many of n endpoints may be out at once.
func (c Config) MaxOut(n int64) int64 {
	return n * int64(100-c.MinHealthyPercent) / 100
}
