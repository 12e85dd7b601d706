//go:build !unix

package top

import "os"

// TerminalRows is fallback where the terminal's size is not read.
func TerminalRows(_ *os.File, fallback int) int { return fallback }
