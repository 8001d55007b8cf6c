// Package home owns where a hyp installation lives: the HYP_HOME directory and the fixed
// names inside it (SPEC 2), and which gateway it is: the gateway id generated once for the
// home and its binding to the path and machine it was generated for (gateway.go). Those two
// files are the only ones it creates or reads; of the home directory itself it makes sure it
// exists and is private to its owner (SPEC 2), as is everything the process creates.
package home

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Private makes every file and directory this process creates from now on private to its
// owner (mode 0600 / 0700, SPEC 2): telemetry holds secrets, and the libraries that write
// into the home (Iceberg metadata, Parquet, bbolt) create files with the umask's modes.
func Private() { syscall.Umask(0o077) }

// Prepare creates the home if it is missing and makes it private to its owner, so nothing
// beneath it (files written by older versions included) is reachable by another user.
func Prepare(home string) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("home %s: %w", home, err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		return fmt.Errorf("home %s: make it private: %w", home, err)
	}
	return nil
}

// Resolve picks the home: the --home flag, else $HYP_HOME, else ~/.hyp. The result is absolute.
func Resolve(flag string) (string, error) {
	dir := flag
	if dir == "" {
		dir = os.Getenv("HYP_HOME")
	}
	if dir == "" {
		u, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no --home, no HYP_HOME and no user home directory: %w", err)
		}
		dir = filepath.Join(u, ".hyp")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("home %q: %w", dir, err)
	}
	return abs, nil
}

// Socket is the daemon's control socket.
func Socket(home string) string { return filepath.Join(home, "hyp.sock") }

// Cache is the cache directory.
func Cache(home string) string { return filepath.Join(home, "cache") }

// Config is the default config file.
func Config(home string) string { return filepath.Join(home, "hyp.yaml") }

// Sinks holds every sink instance's own state, a directory per instance (Sink); the
// watermark store lays out its files beneath it.
func Sinks(home string) string { return filepath.Join(home, "sinks") }

// Sink is one sink instance's directory: its watermarks, quarantined units and temp files,
// laid out beneath it by the watermark store and the sink package.
func Sink(home, instance string) string { return filepath.Join(Sinks(home), instance) }

// Ledger is `hyp server`'s ledger on a single node: every seq it stored, per gateway,
// dataset and partition. Its directory is the caller's to create.
func Ledger(home string) string { return filepath.Join(home, "server", "ledger.db") }

// Exports is the root of the default local-fs sink.
func Exports(home string) string { return filepath.Join(home, "exports") }
