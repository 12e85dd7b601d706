package outboundpolicy

import (
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// failureAccrual is the policy's FailureAccrual from the parent Service's
// balancer annotations: nil unless balancer.plexus.dev/failure-accrual is
// "consecutive", else every field set, the defaults where an annotation
// is absent or malformed. err names each malformed annotation (reported
// whether accrual is on or not).
func failureAccrual(annotations map[string]string) (*destinationpb.FailureAccrual, error) {
	a, enabled, err := balancerannotations.ParseAccrual(annotations)
	if !enabled {
		return nil, err
	}
	return &destinationpb.FailureAccrual{
		ConsecutiveFailures: uint32(a.ConsecutiveFailures),
		MinPenalty:          durationpb.New(a.MinPenalty),
		MaxPenalty:          durationpb.New(a.MaxPenalty),
		JitterRatio:         a.JitterRatio,
		MinHealthyPercent:   uint32(a.MinHealthyPercent),
	}, err
}
