package netnsrules

import (
	"fmt"
	"time"
)

// ms formats d in milliseconds for the logs.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
