package transform

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

// vmRSS is this process's resident set in KiB, from /proc.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("read /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	t.Fatal("/proc/self/status has no VmRSS")
	return 0
}

// TestApplyDoesNotLeak runs many small Applies and checks the process's resident memory
// stops growing. duckdb-go's Arrow views leaked the schema of the view at every statement
// (~1.6 KB each) until patches/duckdb-go.patch: 20,000 Applies grew by 31 MiB, where now
// the growth stays within what the first Applies' warm-up takes. HYP_LEAK_APPLIES sets the
// count (make soak runs 100,000); with the default the test takes a few seconds.
func TestApplyDoesNotLeak(t *testing.T) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("HYP_LEAK_APPLIES")); err == nil && v > 0 {
		n = v
	}
	r := newTestRunner(t)
	schema, units := logUnits(t, 1, 10, 10)
	apply := func(k int) {
		for range k {
			res, err := r.Apply(context.Background(), benchSQL, schema, units[0])
			if err != nil {
				t.Fatal(err)
			}
			res.Release()
		}
	}
	apply(2000) // warm-up: DuckDB's caches, Go's heap
	// A leak of the view's schema costs 1.6 KB an Apply; allow a quarter of that. A leak grows
	// the resident set round after round, where a heap or an allocator arena that grew once
	// (more likely on a loaded machine) does not grow again: three rounds over it fail.
	limit := int64(n) * 400 / 1024
	var grew []int64
	for range 3 {
		before := vmRSS(t)
		apply(n)
		grew = append(grew, vmRSS(t)-before)
		t.Logf("%d Applies: resident memory grew by %d KiB", n, grew[len(grew)-1])
		if grew[len(grew)-1] <= limit {
			return
		}
	}
	t.Errorf("each of 3 rounds of %d Applies grew the resident set by more than %d KiB (%v KiB): a leak per Apply", n, limit, grew)
}
