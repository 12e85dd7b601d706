package component

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
)

func TestRunEndsAllWhenOnePartEnds(t *testing.T) {
	boom := errors.New("boom")
	stopped := make(chan struct{})
	err := Run(context.Background(),
		Part{Name: "waiter", Run: func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }},
		Part{Name: "failer", Run: func(context.Context) error { return boom }})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "failer stopped: ") {
		t.Errorf("Run = %v, want failer stopped: boom", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("Run returned before the other part ended")
	}
	err = Run(context.Background(), Part{Name: "quitter", Run: func(context.Context) error { return nil }})
	if err == nil || err.Error() != "quitter stopped unexpectedly" {
		t.Errorf("a part that returned nil early: %v", err)
	}
}

func TestRunReturnsNilWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	lns, err := Listen("127.0.0.1:0", "", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if lns[1] != nil || Addr(lns[1]) != "" {
		t.Fatalf("an empty address gave listener %v", lns[1])
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx,
			HTTP("web", lns[0], &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}),
			GRPC("grpc", lns[2], grpc.NewServer()),
			Admin(nil, Registry()))
	}()
	resp, err := http.Get("http://" + Addr(lns[0]) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the HTTP part answered %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after the context ended = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	if _, err := net.Dial("tcp", Addr(lns[0])); err == nil {
		t.Error("the HTTP part's listener still accepts")
	}
}

func TestListenIsAllOrNone(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	if _, err := Listen(addr, held.Addr().String()); err == nil || !strings.Contains(err.Error(), held.Addr().String()) {
		t.Fatalf("Listen with a taken address = %v, want an error naming it", err)
	}
	ln, err := net.Listen("tcp", addr) // the first was closed again
	if err != nil {
		t.Fatalf("Listen left %s open after failing: %v", addr, err)
	}
	ln.Close()
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	Every(ctx, time.Millisecond, func(context.Context) {
		if n++; n == 3 {
			cancel()
		}
	})
	if n != 3 {
		t.Errorf("fn ran %d times, want 3 (until the context ended)", n)
	}
}
