package routes

import (
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func responseRule(t *testing.T, classes []*pb.ResponseClass, retry *pb.RetryPolicy) *Rule {
	t.Helper()
	r := rule()
	r.ResponseClasses, r.Retry = classes, retry
	return mustCompile(t, policy(route("r", nil, r))).Routes[0].Rules[0]
}

func respAll(ms ...*pb.ResponseMatch) *pb.ResponseMatch {
	return &pb.ResponseMatch{Kind: &pb.ResponseMatch_All{All: &pb.ResponseMatches{Matches: ms}}}
}
func respAny(ms ...*pb.ResponseMatch) *pb.ResponseMatch {
	return &pb.ResponseMatch{Kind: &pb.ResponseMatch_Any{Any: &pb.ResponseMatches{Matches: ms}}}
}
func respNot(m *pb.ResponseMatch) *pb.ResponseMatch {
	return &pb.ResponseMatch{Kind: &pb.ResponseMatch_Not{Not: m}}
}

type classCase struct {
	status int
	grpc   string
	want   bool
}

func checkClasses(t *testing.T, name string, f func(int, string) bool, cases []classCase) {
	t.Helper()
	for _, c := range cases {
		if got := f(c.status, c.grpc); got != c.want {
			t.Errorf("%s(%d, %q) = %v, want %v", name, c.status, c.grpc, got, c.want)
		}
	}
}

func TestIsFailureDefault(t *testing.T) {
	r := responseRule(t, nil, nil)
	checkClasses(t, "IsFailure", r.IsFailure, []classCase{
		{200, "", false}, {404, "", false}, {499, "", false}, {500, "", true}, {503, "", true},
		{200, "0", false}, {200, "14", true}, {200, "2", true}, {503, "0", true},
	})
}

func TestIsFailureClasses(t *testing.T) {
	r := responseRule(t, []*pb.ResponseClass{
		{Condition: statusIn(500, 500), IsFailure: false}, // 500 is fine here
		{Condition: respAll(statusIn(400, 499), respNot(statusIn(404, 404))), IsFailure: true},
		{Condition: respAny(statusIn(201, 201), statusIn(0, 100)), IsFailure: true}, // 0 min: 100
		{Condition: statusIn(400, 0), IsFailure: false},                             // 0 max: 599; 404 and 5xx
	}, nil)
	checkClasses(t, "IsFailure", r.IsFailure, []classCase{
		{500, "", false},  // first class
		{403, "", true},   // second
		{404, "", false},  // not second; fourth says success
		{201, "", true},   // third
		{100, "", true},   // third, min defaulted
		{503, "", false},  // fourth
		{200, "", false},  // none: default
		{200, "13", true}, // none: default, gRPC
		{600, "", true},   // none: default
	})
}

func TestRetryable(t *testing.T) {
	var nilPolicy *RetryPolicy
	checkClasses(t, "nil.Retryable", nilPolicy.Retryable, []classCase{{503, "", false}, {200, "14", false}})

	r := responseRule(t, nil, &pb.RetryPolicy{
		Limit:        2,
		HttpStatuses: []*pb.StatusRange{{Min: 502, Max: 504}, {Min: 429, Max: 429}},
		GrpcCodes:    []uint32{14, 4},
	})
	checkClasses(t, "Retryable", r.Retry.Retryable, []classCase{
		{502, "", true}, {503, "", true}, {504, "", true}, {429, "", true},
		{500, "", false}, {505, "", false}, {200, "", false},
		{200, "14", true}, {200, "4", true}, {200, "13", false}, {200, "0", false},
		{200, "x", false}, {200, "99999999999", false}, {200, "4294967310", false},
	})

	failures := responseRule(t, []*pb.ResponseClass{{Condition: statusIn(404, 404), IsFailure: true}},
		&pb.RetryPolicy{Failures: true, HttpStatuses: []*pb.StatusRange{{Min: 200, Max: 200}}})
	checkClasses(t, "Retryable(failures)", failures.Retry.Retryable, []classCase{
		{404, "", true}, {500, "", true}, {200, "", false}, {200, "14", true},
	})
}

func TestParseCode(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "14": 14, "4294967295": 4294967295, "": -1, "4294967296": -1, "1a": -1, "-1": -1} {
		got, ok := parseCode(s)
		if want < 0 && ok || want >= 0 && (!ok || int64(got) != want) {
			t.Errorf("parseCode(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
}

func TestRetryPolicyFields(t *testing.T) {
	r := responseRule(t, nil, &pb.RetryPolicy{Limit: 3, AttemptTimeout: newDuration(2)})
	p := r.Retry
	if p.Limit != 3 || p.AttemptTimeout.Seconds() != 2 || p.Budget == nil || p.Failures {
		t.Errorf("RetryPolicy = %+v", p)
	}
	if responseRule(t, nil, nil).Retry != nil {
		t.Error("a rule without retry has a RetryPolicy")
	}
}
