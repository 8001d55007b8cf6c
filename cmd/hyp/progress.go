package main

import (
	"context"
	"os"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progress shows a long command's progress on a terminal (stderr) and is silent otherwise,
// so scripts and pipes see only the final output.
type progress struct {
	p   *mpb.Progress
	bar *mpb.Bar
}

// newProgress starts a byte progress bar for total bytes (0 when unknown, as for stdin).
func newProgress(ctx context.Context, label string, total int64) *progress {
	if !isTerminal(os.Stderr) {
		return &progress{}
	}
	p := mpb.NewWithContext(ctx, mpb.WithOutput(os.Stderr), mpb.WithWidth(40))
	bar := p.AddBar(total,
		mpb.PrependDecorators(decor.Name(label+" "), decor.Counters(decor.SizeB1024(0), "% .1f / % .1f")),
		mpb.AppendDecorators(decor.AverageSpeed(decor.SizeB1024(0), "% .1f"), decor.Name(" "), decor.Percentage()),
	)
	return &progress{p: p, bar: bar}
}

// add records n more bytes done.
func (pr *progress) add(n int) {
	if pr.bar != nil {
		pr.bar.IncrBy(n)
	}
}

// done completes the bar (also when the total was unknown) and waits for its last render.
func (pr *progress) done() {
	if pr.bar == nil {
		return
	}
	pr.bar.SetTotal(-1, true)
	pr.p.Wait()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
