// Package sockfile clears the path of a unix socket the node agent binds
// (the plugin's report socket, the pod lookup socket): a socket file an
// earlier listener left there is removed; any other file is an error, so
// a wrong path never deletes a real file.
package sockfile

import (
	"fmt"
	"io/fs"
	"os"
)

// Clear makes path free for a new socket.
func Clear(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil // nothing there (or nothing we may look at: bind will say)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the old socket: %w", err)
	}
	return nil
}
