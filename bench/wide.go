package main

import (
	"bytes"
	"fmt"
	"net/http"
)

// wideBench posts fields rows that each bring a new field (`{"id":i,"fNNNNN":i}`), perReq
// rows a request, then queries them, and reports the daemon's peak RSS: the case where a
// dataset grows a column per row.
func wideBench(bin string, fields, perReq int) error {
	d, err := startDaemon(bin)
	if err != nil {
		return err
	}
	defer d.stop()
	hc := &http.Client{}
	for start := 0; start < fields; start += perReq {
		var b bytes.Buffer
		for i := start; i < min(fields, start+perReq); i++ {
			fmt.Fprintf(&b, `{"id":%d,"f%05d":%d}`+"\n", i, i, i)
		}
		if err := d.post(hc, "?source=s", b.Bytes()); err != nil {
			return err
		}
	}
	out, took, err := d.hyp("query", "sql", "SELECT count(*) AS n FROM logs", "--format", "jsonl")
	if err != nil {
		return fmt.Errorf("count: %v: %s", err, out)
	}
	cur, peak := d.rss()
	fmt.Printf("wide: %d rows each adding a field, %d a request: count %s in %s; peak RSS %d MiB, RSS at end %d MiB\n",
		fields, perReq, bytes.TrimSpace([]byte(out)), took.Round(1e6), peak>>10, cur>>10)
	return nil
}
