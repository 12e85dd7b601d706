package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// pollFiles is how often whenExists and cat -wait look for a file.
const pollFiles = 50 * time.Millisecond

// whenExists returns a channel closed once path exists; nil (never
// closed) for "".
func whenExists(path string) <-chan struct{} {
	if path == "" {
		return nil
	}
	exists := make(chan struct{})
	go func() {
		for {
			if _, err := os.Stat(path); err == nil {
				close(exists)
				return
			}
			time.Sleep(pollFiles) // Sleep: polling a file another process creates
		}
	}()
	return exists
}

// writeFile writes a whole file at once: a reader sees all of it or no
// file.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// touch creates each file that does not exist.
func touch(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: testapp touch FILE...")
	}
	for _, path := range args {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// cat prints a file, waiting up to -wait for it to exist.
func cat(args []string) error {
	fs := flag.NewFlagSet("cat", flag.ContinueOnError)
	wait := fs.Duration("wait", 0, "how long to wait for the file to exist")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: testapp cat [-wait D] FILE")
	}
	path := fs.Arg(0)
	select {
	case <-whenExists(path):
	case <-time.After(*wait):
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s did not appear within %v: %w", path, *wait, err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(data)
	return err
}
