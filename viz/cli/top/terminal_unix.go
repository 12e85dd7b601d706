//go:build unix

package top

import (
	"os"

	"golang.org/x/sys/unix"
)

// TerminalRows is how many rows of the table fit on the terminal f (its
// height less the title and header), or fallback when f is not one.
func TerminalRows(f *os.File, fallback int) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row < 8 {
		return fallback
	}
	return int(ws.Row) - 5
}
