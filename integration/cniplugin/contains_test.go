package cniplugin

import (
	"fmt"
	"strings"
)

func contains(haystack, needle string) error {
	if !strings.Contains(haystack, needle) {
		return fmt.Errorf("want %q in:\n%s", needle, haystack)
	}
	return nil
}
