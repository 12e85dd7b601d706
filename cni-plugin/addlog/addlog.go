// Package addlog writes and reads the timings plexus-cni logs (for each
// ADD of a meshed pod decide_ms, the config and pod lookup, and elapsed_ms,
// the whole ADD in the process; at debug level get_ms and restore_ms): the
// plugin's packages write them with Millis, benchmarks that run the plugin
// binary read them back.
package addlog

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Millis formats d as plexus-cni's *_ms log values hold it: milliseconds
// with two decimals, what Durations reads back.
func Millis(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// Times returns decide_ms and elapsed_ms of every "ADD done" line with
// mesh=true in the log file at path, in order.
func Times(path string) (decide, total []time.Duration, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading plexus-cni log: %w", err)
	}
	meshed := func(line string) bool { return strings.Contains(line, " mesh=true") }
	return Durations(data, "ADD done", "decide_ms", meshed), Durations(data, "ADD done", "elapsed_ms", meshed), nil
}

// Durations returns the value of key, in milliseconds, on every line of log
// whose message is msg and that keep accepts (nil accepts all), in order.
func Durations(log []byte, msg, key string, keep func(line string) bool) []time.Duration {
	var out []time.Duration
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.Contains(line, ` msg="`+msg+`"`) || (keep != nil && !keep(line)) {
			continue
		}
		if d, ok := field(line, key); ok {
			out = append(out, d)
		}
	}
	return out
}

// field reads key=<milliseconds> from a slog text line.
func field(line, key string) (time.Duration, bool) {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return 0, false
	}
	v, _, _ := strings.Cut(rest, " ")
	f, err := strconv.ParseFloat(v, 64)
	return time.Duration(f * float64(time.Millisecond)), err == nil
}
