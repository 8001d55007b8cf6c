// Package hypbin builds the hyp binary once for a test binary whose tests run it as a
// subprocess (cmd/hyp's end-to-end tests, deploy's checks of the units), or hands them the
// one HYP_TEST_BIN names. It never runs it.
package hypbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Main builds the hyp command in pkg (a package path relative to the test's directory) into
// a temporary directory, sets *bin to it, runs the tests and exits with their code. With armed
// set it also builds the same command with the failpoints build tag into *armed, for the
// crash tests that set HYP_FAILPOINT (the shipped binary has no switch: internal/failpoint).
//
// When HYP_TEST_BIN is set, *bin is that binary and nothing is built: `make test` sets it to
// the bin/hyp it built, so the tests run the binary as shipped (stripped, linked with the
// Makefile's flags), not a `go build` of the same code; and HYP_TEST_FAILPOINT_BIN to the
// armed one it built beside it, which a test binary that asks for one then needs.
func Main(pkg string, bin, armed *string, run func() int) {
	if b := os.Getenv("HYP_TEST_BIN"); b != "" {
		*bin = mustAbs(b)
		if armed != nil {
			a := os.Getenv("HYP_TEST_FAILPOINT_BIN")
			if a == "" {
				fmt.Fprintln(os.Stderr, "HYP_TEST_BIN is set but HYP_TEST_FAILPOINT_BIN is not: the crash tests need a binary built with -tags failpoints (make test builds bin/hyp-failpoints)")
				os.Exit(1)
			}
			*armed = mustAbs(a)
		}
		os.Exit(run())
	}
	dir, err := os.MkdirTemp("", "hyp-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "hyp")
	build(dir, pkg, *bin)
	if armed != nil {
		*armed = filepath.Join(dir, "hyp-failpoints")
		build(dir, pkg, *armed, "-tags="+withTag(os.Getenv("GOFLAGS"), "failpoints"))
	}
	code := run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func build(dir, pkg, out string, flags ...string) {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build hyp: %v\n%s", err, b)
		os.RemoveAll(dir)
		os.Exit(1)
	}
}

// withTag is the build tags GOFLAGS sets, plus tag: a -tags flag on the command line
// replaces GOFLAGS' instead of adding to it, and hyp does not build without duckdb_arrow.
func withTag(goflags, tag string) string {
	for _, f := range strings.Fields(goflags) {
		if tags, ok := strings.CutPrefix(f, "-tags="); ok && tags != "" {
			return tags + "," + tag
		}
	}
	return tag
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return abs
}
