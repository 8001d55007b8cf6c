//go:build !linux || !cgo

package transform

// keepHeap tunes glibc's allocator on Linux (malloc_linux.go); elsewhere the platform's
// allocator keeps its defaults.
func keepHeap() {}
