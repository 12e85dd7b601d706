package mesh

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// booksAndClientOn deploys, in ns, books (two meshed replicas behind a
// Service) and a meshed client, all on node, and returns the client pod
// and books' URL once ready is called: a test may add to the namespace
// (a route) in between.
func booksAndClientOn(t *testing.T, c *clustertest.Cluster, ns, node string) (ready func() (clientPod, url string)) {
	t.Helper()
	server := podSpec("books", "serve", ":8080")
	server.NodeSelector = map[string]string{corev1.LabelHostname: node}
	deploy(t, c, ns, "books", 2, meshed, server)
	service(t, c, ns, "books", 8080)
	client := podSpec("client", "serve", ":8080")
	client.NodeSelector = map[string]string{corev1.LabelHostname: node}
	deploy(t, c, ns, "client", 1, meshed, client)
	return func() (string, string) {
		c.WaitDeploymentReady(t, ns, "books", 3*time.Minute)
		c.WaitDeploymentReady(t, ns, "client", 3*time.Minute)
		return pods(t, c, ns, "client")[0].Name, "http://books." + ns + ".svc.cluster.local/"
	}
}

// steadyLoad is `testapp load` at 100 requests/s with 16 at most in
// flight, run in a client pod until stopped (5 minutes at most): the load
// a test keeps up through a node's loss or drain.
type steadyLoad struct {
	c                 *clustertest.Cluster
	ns, pod, stopFile string
	wg                sync.WaitGroup
	res               loadResult
	err               error
	stopped           bool
}

// startSteadyLoad starts the load from pod to url; name makes its stop
// file unique. The test's end stops it if the test did not.
func startSteadyLoad(t *testing.T, c *clustertest.Cluster, ns, pod, url, name string) *steadyLoad {
	t.Helper()
	l := &steadyLoad{c: c, ns: ns, pod: pod, stopFile: "/tmp/stop-" + name}
	l.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		l.res, l.err = execLoad(ctx, c, ns, pod, "-rate", "100", "-duration", "300s", "-c", "16", "-timeout", "5s",
			"-stop-file", l.stopFile, url)
	})
	t.Cleanup(func() { l.stop(t) })
	return l
}

// wantAllAnswered stops the load and requires at least floor requests,
// every one answered 200; through says what they went through.
func (l *steadyLoad) wantAllAnswered(t *testing.T, floor int, through string) {
	t.Helper()
	res, err := l.stop(t)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if res.Statuses["200"] != res.Requests || res.Requests < floor {
		t.Errorf("%d requests over %.0f s %s, statuses %v, errors %v; want at least %d, every one answered 200",
			res.Requests, res.Seconds, through, res.Statuses, res.Errors, floor)
	}
	t.Logf("%d requests over %.0f s %s, statuses %v", res.Requests, res.Seconds, through, res.Statuses)
}

// stop ends the load (once) and returns what it measured.
func (l *steadyLoad) stop(t *testing.T) (loadResult, error) {
	t.Helper()
	if !l.stopped {
		l.stopped = true
		l.c.Kubectl(t, "-n", l.ns, "exec", l.pod, "-c", "app", "--", "/testapp", "touch", l.stopFile)
		l.wg.Wait()
	}
	return l.res, l.err
}
