// Package loadgen is an open-loop HTTP load generator: requests are
// scheduled at a fixed rate and each latency is measured from the time the
// request was due, not from when a worker got to it, so a slow server shows
// up as latency instead of silently lowering the rate.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Config is one constant-rate run.
type Config struct {
	URL      string
	Rate     int           // requests per second
	Duration time.Duration // how long to send
	Workers  int           // concurrent requests at most (keep-alive connections)
	Client   *http.Client
	// Do, if set, makes one request instead of a GET of URL with Client
	// (HTTP/2, gRPC): worker is the calling worker's index, 0 to
	// Workers-1, for state a worker keeps (a gRPC stream).
	Do func(ctx context.Context, worker int) error
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Do == nil && c.URL == "":
		return errors.New("loadgen: URL or Do is required")
	case c.Rate <= 0:
		return fmt.Errorf("loadgen: rate %d must be positive", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("loadgen: duration %s must be positive", c.Duration)
	case c.Workers <= 0:
		return fmt.Errorf("loadgen: workers %d must be positive", c.Workers)
	case c.Do == nil && c.Client == nil:
		return errors.New("loadgen: client is required")
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	Latencies []time.Duration // successful requests, due time to full body read
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
}

// Run sends c.Rate requests per second for c.Duration and waits for the
// ones in flight (bounded by ctx).
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	total := int(float64(c.Rate) * c.Duration.Seconds())
	interval := time.Second / time.Duration(c.Rate)
	due := make(chan time.Time, total)
	var mu sync.Mutex
	res := Result{Latencies: make([]time.Duration, 0, total)}
	var wg sync.WaitGroup
	for w := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				err := c.do(ctx, w)
				lat := time.Since(at)
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstErr == nil {
						res.FirstErr = err
					}
				} else {
					res.Latencies = append(res.Latencies, lat)
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		due <- at
	}
	close(due)
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, ctx.Err()
}

// Saturate sends requests back to back from c.Workers workers for
// c.Duration (c.Rate is ignored) and returns how many succeeded per second.
func Saturate(ctx context.Context, c Config) (float64, Result, error) {
	c.Rate = 1
	if err := c.Validate(); err != nil {
		return 0, Result{}, err
	}
	// Workers stop starting requests at the end and let the ones in
	// flight finish: a request cut short by the clock is not an error.
	var mu sync.Mutex
	var res Result
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(c.Duration)
	for w := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) {
				t := time.Now()
				err := c.do(ctx, w)
				mu.Lock()
				switch {
				case err == nil:
					res.Latencies = append(res.Latencies, time.Since(t))
				case ctx.Err() == nil:
					res.Errors++
					if res.FirstErr == nil {
						res.FirstErr = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return float64(len(res.Latencies)) / res.Elapsed.Seconds(), res, nil
}

func (c Config) do(ctx context.Context, worker int) error {
	if c.Do != nil {
		return c.Do(ctx, worker)
	}
	return Get(ctx, c.Client, c.URL)
}

// Get is one GET of url whose whole body is read; any status but 200 is
// an error.
func Get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
