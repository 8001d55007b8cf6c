// Package hypbin builds the hyp binary once for a test binary whose tests run it as a
// subprocess (cmd/hyp's end-to-end tests, deploy's checks of the units). It never runs it.
package hypbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Main builds the hyp command in pkg (a package path relative to the test's directory) into
// a temporary directory, sets *bin to it, runs the tests and exits with their code.
func Main(pkg string, bin *string, run func() int) {
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
