// Package version is the version of this build of Plexus: the tag of its
// images, set at build time with
// -ldflags "-X github.com/plexus-mesh/plexus/control/version.Version=TAG".
package version

// Version is "dev" in a build from the work tree.
var Version = "dev"
