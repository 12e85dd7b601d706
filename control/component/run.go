package component

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// ShutdownTimeout bounds a server's graceful stop: connections still open
// after it are closed.
const ShutdownTimeout = 5 * time.Second

// Part is one long-running piece of a component: a server on its
// listener, a watch loop, a certificate renewer.
type Part struct {
	Name string
	// Run runs until ctx ends, then returns nil, or fails with an error.
	Run func(ctx context.Context) error
}

// Run runs parts until ctx ends or one of them returns, then ends the
// others and waits for all. It returns nil when ctx ended first, and
// otherwise names the part that stopped: "NAME stopped: ERR", or "NAME
// stopped unexpectedly" when it returned nil.
func Run(ctx context.Context, parts ...Part) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type ended struct {
		name string
		err  error
	}
	done := make(chan ended, len(parts))
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() { done <- ended{p.Name, p.Run(ctx)} })
	}
	var err error
	select {
	case <-ctx.Done():
	case e := <-done:
		if ctx.Err() == nil {
			err = fmt.Errorf("%s stopped unexpectedly", e.name)
			if e.err != nil {
				err = fmt.Errorf("%s stopped: %w", e.name, e.err)
			}
		}
	}
	cancel()
	wg.Wait()
	return err
}

// Listen opens a TCP listener on each of addrs, in order (nil for an
// empty address: none): all of them, or none (those opened are closed)
// and an error naming the address.
func Listen(addrs ...string) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(addrs))
	for _, a := range addrs {
		if a == "" {
			lns = append(lns, nil)
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				if l != nil {
					l.Close()
				}
			}
			return nil, fmt.Errorf("listening on %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Addr is ln's address for a log line: "" for none.
func Addr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// HTTP is the part serving srv on ln, over TLS when srv.TLSConfig is set
// (its certificates or GetCertificate), shut down gracefully within
// ShutdownTimeout once ctx ends.
func HTTP(name string, ln net.Listener, srv *http.Server) Part {
	return Part{Name: name, Run: func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() {
			if srv.TLSConfig != nil {
				errc <- srv.ServeTLS(ln, "", "")
			} else {
				errc <- srv.Serve(ln)
			}
		}()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		shutdown, done := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer done()
		if err := srv.Shutdown(shutdown); err != nil {
			srv.Close()
		}
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}}
}

// GRPC is the part serving gs on ln, stopped gracefully once ctx ends:
// streams still open after ShutdownTimeout are cut.
func GRPC(name string, ln net.Listener, gs *grpc.Server) Part {
	return Part{Name: name, Run: func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- gs.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(ShutdownTimeout):
			gs.Stop()
		}
		return <-errc
	}}
}

// Every runs fn every interval until ctx ends, the first time one
// interval from now.
func Every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}
