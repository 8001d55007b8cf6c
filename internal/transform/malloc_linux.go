//go:build linux && cgo

package transform

/*
#include <malloc.h>
*/
import "C"

import "sync"

// keepHeap makes the C allocator keep up to 8 MiB of freed memory at the top of each heap
// instead of handing it back to the kernel, and serve allocations up to 4 MiB from the
// heap instead of fresh mappings. DuckDB builds each result's Arrow buffers with malloc and
// realloc (a few hundred KiB a column per Apply) and frees them when the sink has the rows;
// at glibc's defaults every Apply then faults those pages in anew, which on this project's
// virtual machines cost about a sixth of a transform's CPU (BenchmarkApply/loadgen, with
// and without GLIBC_TUNABLES set so, alternating: 7.0-7.4 against 10-12 ms a 10,000-row
// unit). It is a setting of the whole process, made once, when the first Runner opens: the
// only other C code hyp runs is DuckDB's, which does the same kind of work in queries.
var keepHeap = sync.OnceFunc(func() {
	C.mallopt(C.M_TRIM_THRESHOLD, 8<<20)
	C.mallopt(C.M_MMAP_THRESHOLD, 4<<20)
})
