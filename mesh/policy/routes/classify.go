package routes

import (
	"errors"
	"fmt"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// statusRange is an inclusive range of HTTP statuses.
type statusRange struct{ min, max int }

// compileRange reads a StatusRange as Linkerd reads a profile's: an unset
// (zero) min is 100, an unset max is 599.
func compileRange(r *destinationpb.StatusRange) (statusRange, error) {
	s := statusRange{int(r.GetMin()), int(r.GetMax())}
	if s.min == 0 {
		s.min = 100
	}
	if s.max == 0 {
		s.max = 599
	}
	if s.min > s.max {
		return s, fmt.Errorf("status range %d-%d is empty", s.min, s.max)
	}
	return s, nil
}

func (s statusRange) contains(status int) bool { return s.min <= status && status <= s.max }

// responseClass is a compiled ServiceProfile responseClass.
type responseClass struct {
	cond    *responseCond
	failure bool
}

type responseCond struct {
	op   condOp // condStatus, condAll, condAny or condNot
	r    statusRange
	subs []*responseCond
}

func compileResponseCond(m *destinationpb.ResponseMatch) (*responseCond, error) {
	switch k := m.GetKind().(type) {
	case *destinationpb.ResponseMatch_Status:
		r, err := compileRange(k.Status)
		return &responseCond{op: condStatus, r: r}, err
	case *destinationpb.ResponseMatch_All:
		subs, err := compileEach(k.All.GetMatches(), compileResponseCond)
		return &responseCond{op: condAll, subs: subs}, err
	case *destinationpb.ResponseMatch_Any:
		subs, err := compileEach(k.Any.GetMatches(), compileResponseCond)
		return &responseCond{op: condAny, subs: subs}, err
	case *destinationpb.ResponseMatch_Not:
		sub, err := compileResponseCond(k.Not)
		return &responseCond{op: condNot, subs: []*responseCond{sub}}, err
	}
	return nil, errors.New("response condition with nothing set")
}

func (c *responseCond) eval(status int) bool {
	switch c.op {
	case condAll:
		for _, s := range c.subs {
			if !s.eval(status) {
				return false
			}
		}
		return true
	case condAny:
		for _, s := range c.subs {
			if s.eval(status) {
				return true
			}
		}
		return false
	case condNot:
		return !c.subs[0].eval(status)
	default:
		return c.r.contains(status)
	}
}

// IsFailure classifies a response: by the rule's ServiceProfile response
// classes, the first that matches the status deciding; when none matches
// (or there are none), a status of 500 or more, or a grpc-status other
// than "" and "0", is a failure.
func (r *Rule) IsFailure(status int, grpcStatus string) bool {
	for _, c := range r.classes {
		if c.cond.eval(status) {
			return c.failure
		}
	}
	return status >= 500 || grpcStatus != "" && grpcStatus != "0"
}

// RetryPolicy is a rule's retry policy.
type RetryPolicy struct {
	// Limit is how many retries may follow the first attempt.
	Limit int
	// AttemptTimeout bounds each attempt; 0: none.
	AttemptTimeout time.Duration
	// Budget every retry withdraws from and every request of the rule
	// deposits into; shared by the rules of a route with equal budgets (of
	// the whole table for a ServiceProfile). Never nil from Compile.
	Budget *Budget
	// Failures: retry what the rule's IsFailure calls a failure
	// (ServiceProfile isRetryable) instead of the listed statuses.
	Failures bool

	rule      *Rule
	statuses  []statusRange
	grpcCodes []uint32
}

// Retryable reports whether a response may be retried: with Failures, when
// the rule classifies it as a failure; otherwise when the status is in the
// policy's HTTP status ranges, or the grpc-status is one of its gRPC codes.
// A nil policy retries nothing.
func (p *RetryPolicy) Retryable(status int, grpcStatus string) bool {
	if p == nil {
		return false
	}
	if p.Failures {
		return p.rule.IsFailure(status, grpcStatus)
	}
	for _, s := range p.statuses {
		if s.contains(status) {
			return true
		}
	}
	if code, ok := parseCode(grpcStatus); ok {
		for _, c := range p.grpcCodes {
			if c == code {
				return true
			}
		}
	}
	return false
}

// parseCode parses a grpc-status value (decimal, at most 10 digits).
func parseCode(s string) (uint32, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return uint32(n), n <= 1<<32-1
}

// Classifies reports whether the rule has response classes of its own
// (a ServiceProfile's responseClasses), which then decide success.
func (r *Rule) Classifies() bool { return len(r.classes) > 0 }

// RetriesGRPC reports whether p can retry a gRPC status: it names gRPC
// codes, or retries what the rule's response classes call failures.
func (p *RetryPolicy) RetriesGRPC() bool {
	return p != nil && (len(p.grpcCodes) > 0 || p.Failures)
}
