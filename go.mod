module github.com/plexus-mesh/plexus

go 1.26.0
