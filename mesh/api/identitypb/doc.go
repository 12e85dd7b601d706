// Package identitypb is the generated gRPC API of the identity service (identity.proto).
package identitypb
