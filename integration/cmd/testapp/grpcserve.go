package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// healthServer answers grpc.health.v1.Health/Check with SERVING, or fails
// and delays as the call's x-<name> metadata asks (see the package
// documentation); the header x-echo-server names the serving host.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	b *backend
}

func (h healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a, err := parseAsk(func(name string) string {
		if v := md.Get("x-" + name); len(v) > 0 {
			return v[0]
		}
		return ""
	})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h.b.forceFailure(&a)
	grpc.SetHeader(ctx, metadata.Pairs("x-echo-server", h.b.host))
	fail, ok := h.b.handle(ctx, "grpc Check "+req.GetService(), a, true)
	switch {
	case !ok:
		return nil, status.FromContextError(ctx.Err()).Err()
	case fail:
		return nil, status.Errorf(codes.Code(a.code), "failing as asked (x-fail=%v) on %s", a.fail, h.b.host)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}
