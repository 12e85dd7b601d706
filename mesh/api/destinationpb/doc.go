// Package destinationpb is the generated gRPC API of the destination service (destination.proto).
package destinationpb
