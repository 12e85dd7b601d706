package addlog

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestTimes(t *testing.T) {
	log := `time=2026-11-23T09:00:00Z level=INFO msg="ADD done" plugin=plexus-cni mesh=true reason="pod has a plexus-proxy container" decide_ms=12.50 elapsed_ms=20.25
time=2026-11-23T09:00:01Z level=INFO msg="ADD done" plugin=plexus-cni mesh=false reason="namespace kube-system is in exclude_namespaces" decide_ms=0.10 elapsed_ms=0.20
time=2026-11-23T09:00:02Z level=DEBUG msg="pod GET" get_ms=3.00
time=2026-11-23T09:00:03Z level=INFO msg="ADD done" plugin=plexus-cni mesh=true reason=x decide_ms=7 elapsed_ms=9.5
`
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	decide, total, err := Times(path)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	if !slices.Equal(decide, []time.Duration{ms(12.5), ms(7)}) || !slices.Equal(total, []time.Duration{ms(20.25), ms(9.5)}) {
		t.Fatalf("decide %v, total %v", decide, total)
	}
	if got := Durations([]byte(log), "pod GET", "get_ms", nil); !slices.Equal(got, []time.Duration{ms(3)}) {
		t.Fatalf("get_ms %v", got)
	}
	if _, _, err := Times(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing log is not an error")
	}
}

// What Millis writes, Durations reads back (to the 10 µs it keeps).
func TestMillisReadsBack(t *testing.T) {
	for _, d := range []time.Duration{0, 1234567 * time.Nanosecond, 20 * time.Millisecond, 3*time.Second + 5*time.Microsecond} {
		line := `time=x level=INFO msg="ADD done" decide_ms=` + Millis(d)
		got := Durations([]byte(line), "ADD done", "decide_ms", nil)
		want := d.Round(10 * time.Microsecond)
		if len(got) != 1 || (got[0]-want).Abs() > time.Microsecond {
			t.Errorf("Millis(%s) = %s read back as %v, want %s", d, Millis(d), got, want)
		}
	}
}
