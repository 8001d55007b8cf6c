// Package hypbin builds the hyp binary once for a test binary whose tests run it as a
// subprocess (cmd/hyp's end-to-end tests, deploy's checks of the units), or hands them the
// one HYP_TEST_BIN names. It never runs it.
package hypbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Main builds the hyp command in pkg (a package path relative to the test's directory) into
// a temporary directory, sets *bin to it, runs the tests and exits with their code.
//
// When HYP_TEST_BIN is set, *bin is that binary and nothing is built: `make test` sets it to
// the bin/hyp it built, so the tests run the binary as shipped (stripped, linked with the
// Makefile's flags), not a `go build` of the same code.
func Main(pkg string, bin *string, run func() int) {
	if b := os.Getenv("HYP_TEST_BIN"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		*bin = abs
		os.Exit(run())
	}
	dir, err := os.MkdirTemp("", "hyp-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "hyp")
	if out, err := exec.Command("go", "build", "-o", *bin, pkg).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build hyp: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := run()
	os.RemoveAll(dir)
	os.Exit(code)
}
