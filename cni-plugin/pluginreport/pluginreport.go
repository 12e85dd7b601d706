// Package pluginreport is the datagram plexus-cni sends the node agent
// after each ADD, DEL and CHECK: its format and checks, the plugin's send
// that never waits, and the agent's parse.
package pluginreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxSize bounds a report datagram; the agent rejects larger ones. A
// report is about 100 bytes.
const MaxSize = 512

// Commands reported.
const (
	Add   = "ADD"
	Del   = "DEL"
	Check = "CHECK"
)

// Outcomes of a command.
const (
	Success = "success" // done; for ADD: rules written for a meshed pod
	Skipped = "skipped" // ADD of a pod that is not meshed: nothing to write
	Error   = "error"   // the command failed; Code says how
)

// MaxElapsed bounds the durations a report may carry; anything longer is
// garbage (the runtime kills a plugin long before).
const MaxElapsed = time.Hour

// Report is what the plugin tells the agent about one command.
type Report struct {
	Command string `json:"command"`
	Outcome string `json:"outcome"`
	// Code is the CNI error code when Outcome is Error (1-999), else 0.
	Code uint `json:"code,omitempty"`
	// ElapsedMS is the command's time in the plugin, from the start of the
	// command function to the send (process start is not included).
	ElapsedMS float64 `json:"elapsed_ms"`
	// DecideMS, for ADD, is the part of ElapsedMS spent deciding (the pod
	// lookup); 0 when no decision was reached.
	DecideMS float64 `json:"decide_ms,omitempty"`
}

// Elapsed is ElapsedMS as a duration.
func (r Report) Elapsed() time.Duration { return msDuration(r.ElapsedMS) }

// Decide is DecideMS as a duration.
func (r Report) Decide() time.Duration { return msDuration(r.DecideMS) }

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// Millis converts d for ElapsedMS and DecideMS, rounded to microseconds.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Validate checks every field, naming the first bad one.
func (r Report) Validate() error {
	switch r.Command {
	case Add, Del, Check:
	default:
		return fmt.Errorf("command %q: want ADD, DEL or CHECK", r.Command)
	}
	switch r.Outcome {
	case Success, Error:
	case Skipped:
		if r.Command != Add {
			return fmt.Errorf("outcome %q is for ADD only, got it for %s", r.Outcome, r.Command)
		}
	default:
		return fmt.Errorf("outcome %q: want success, skipped or error", r.Outcome)
	}
	if (r.Outcome == Error) != (r.Code != 0) {
		return fmt.Errorf("code %d with outcome %s: an error needs a code and only an error has one", r.Code, r.Outcome)
	}
	if r.Code > 999 {
		return fmt.Errorf("code %d is not a CNI error code (1-999)", r.Code)
	}
	limit := float64(MaxElapsed / time.Millisecond)
	for _, f := range []struct {
		name string
		v    float64
	}{{"elapsed_ms", r.ElapsedMS}, {"decide_ms", r.DecideMS}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > limit {
			return fmt.Errorf("%s %v is not a duration between 0 and %v", f.name, f.v, MaxElapsed)
		}
	}
	if r.DecideMS > r.ElapsedMS {
		return fmt.Errorf("decide_ms %v is longer than elapsed_ms %v", r.DecideMS, r.ElapsedMS)
	}
	return nil
}

// Marshal encodes a valid report.
func (r Report) Marshal() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("plugin report: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("plugin report: %w", err)
	}
	return b, nil
}

// ErrTooLarge is returned by Parse for a datagram over MaxSize.
var ErrTooLarge = fmt.Errorf("plugin report: larger than %d bytes", MaxSize)

// Parse decodes and checks one datagram. Unknown members are ignored, so
// a newer plugin can add some while an older agent still runs.
func Parse(b []byte) (Report, error) {
	if len(b) > MaxSize {
		return Report{}, ErrTooLarge
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("plugin report: %w", err)
	}
	if err := r.Validate(); err != nil {
		return Report{}, fmt.Errorf("plugin report: %w", err)
	}
	return r, nil
}

// ErrNoListener wraps the send errors that mean nobody takes reports
// right now: no socket file, nobody bound to it, or its queue is full.
var ErrNoListener = errors.New("no node agent listening")
