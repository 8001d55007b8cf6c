package lakeread

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// avroEnc writes Avro's binary encoding, for building container files by hand.
type avroEnc struct{ bytes.Buffer }

func (e *avroEnc) long(v int64) *avroEnc {
	e.Write(binary.AppendUvarint(nil, uint64(v<<1)^uint64(v>>63)))
	return e
}

func (e *avroEnc) str(s string) *avroEnc {
	e.long(int64(len(s)))
	e.WriteString(s)
	return e
}

func (e *avroEnc) raw(b ...byte) *avroEnc {
	e.Write(b)
	return e
}

var testSync = []byte("0123456789abcdef")

// ocfBytes is a container file of schema holding one block per datum (each one record).
func ocfBytes(t testing.TB, schema, codec string, data ...[]byte) []byte {
	t.Helper()
	var e avroEnc
	e.raw(ocfMagic...)
	meta := map[string]string{"avro.schema": schema}
	if codec != "" {
		meta["avro.codec"] = codec
	}
	e.long(int64(len(meta)))
	for k, v := range meta {
		e.str(k).str(v)
	}
	e.long(0)
	e.raw(testSync...)
	for _, d := range data {
		if codec == "deflate" {
			var z bytes.Buffer
			w, err := flate.NewWriter(&z, flate.BestCompression)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(d)
			w.Close()
			d = z.Bytes()
		}
		e.long(1).long(int64(len(d))).raw(d...).raw(testSync...)
	}
	return e.Bytes()
}

func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
func f64(v float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)) }

func TestReadOCF(t *testing.T) {
	enc := func() *avroEnc { return &avroEnc{} }
	cases := []struct {
		name   string
		schema string
		datum  []byte
		want   any
	}{
		{
			name:   "primitives",
			schema: `{"type":"record","name":"p","fields":[{"name":"n","type":"null"},{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},{"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"y","type":"bytes"},{"name":"s","type":"string"}]}`,
			datum:  enc().raw(1).long(-3).long(1 << 40).raw(f32(1.5)...).raw(f64(-2.25)...).str("\x00\x01").str("héllo").Bytes(),
			want:   map[string]any{"n": nil, "b": true, "i": int64(-3), "l": int64(1 << 40), "f": 1.5, "d": -2.25, "y": []byte{0, 1}, "s": "héllo"},
		},
		{
			name:   "unions pick their branch",
			schema: `{"type":"record","name":"u","fields":[{"name":"a","type":["null","long"]},{"name":"b","type":["null","long"]}]}`,
			datum:  enc().long(0).long(1).long(42).Bytes(),
			want:   map[string]any{"a": nil, "b": int64(42)},
		},
		{
			name:   "array in two blocks, the second with its byte size",
			schema: `{"type":"array","items":"long"}`,
			datum:  enc().long(2).long(1).long(2).long(-1).long(1).long(3).long(0).Bytes(),
			want:   []any{int64(1), int64(2), int64(3)},
		},
		{
			name:   "map",
			schema: `{"type":"map","values":"string"}`,
			datum:  enc().long(2).str("k1").str("v1").str("k2").str("v2").long(0).Bytes(),
			want:   map[string]any{"k1": "v1", "k2": "v2"},
		},
		{
			name:   "enum, fixed and a logical type",
			schema: `{"type":"record","name":"e","fields":[{"name":"e","type":{"type":"enum","name":"kind","symbols":["A","B"]}},{"name":"x","type":{"type":"fixed","name":"f2","size":2}},{"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}}]}`,
			datum:  enc().long(1).raw(7, 8).long(5).Bytes(),
			want:   map[string]any{"e": "B", "x": []byte{7, 8}, "ts": int64(5)},
		},
		{
			name:   "named types referred to by name, across namespaces",
			schema: `{"type":"record","name":"outer","namespace":"a.b","fields":[{"name":"p","type":{"type":"record","name":"pt","fields":[{"name":"x","type":"int"}]}},{"name":"q","type":"pt"},{"name":"r","type":"a.b.pt"}]}`,
			datum:  enc().long(1).long(2).long(3).Bytes(),
			want:   map[string]any{"p": map[string]any{"x": int64(1)}, "q": map[string]any{"x": int64(2)}, "r": map[string]any{"x": int64(3)}},
		},
		{
			name:   "a recursive record",
			schema: `{"type":"record","name":"node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","node"]}]}`,
			datum:  enc().long(1).long(1).long(2).long(0).Bytes(),
			want:   map[string]any{"v": int64(1), "next": map[string]any{"v": int64(2), "next": nil}},
		},
	}
	for _, c := range cases {
		for _, codec := range []string{"", "null", "deflate"} {
			t.Run(c.name+"/"+codec, func(t *testing.T) {
				f, err := readOCF(ocfBytes(t, c.schema, codec, c.datum, c.datum))
				if err != nil {
					t.Fatal(err)
				}
				if len(f.records) != 2 || !reflect.DeepEqual(f.records[0], c.want) || !reflect.DeepEqual(f.records[1], c.want) {
					t.Fatalf("records %#v, want two of %#v", f.records, c.want)
				}
				if string(f.meta["avro.schema"]) != c.schema {
					t.Fatalf("schema metadata %q", f.meta["avro.schema"])
				}
			})
		}
	}
}

func TestReadOCFRejects(t *testing.T) {
	long := `{"type":"record","name":"r","fields":[{"name":"l","type":"long"}]}`
	good := ocfBytes(t, long, "", (&avroEnc{}).long(7).Bytes())
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"not a container file", []byte("PAR1"), "not an object container file"},
		{"truncated", good[:len(good)-3], "sync marker"},
		{"wrong sync marker", append(bytes.Clone(good[:len(good)-1]), 'X'), "sync marker"},
		{"bytes left in a block", ocfBytes(t, long, "", (&avroEnc{}).long(7).long(8).Bytes()), "bytes after its records"},
		{"unsupported codec", ocfBytes(t, long, "snappy"), `codec "snappy"`},
		{"bad schema", ocfBytes(t, `{"type":"record","name":"r","fields":[{"name":"x","type":"nosuch"}]}`, ""), `unknown type "nosuch"`},
		{"union index out of range", ocfBytes(t, `["null","long"]`, "", (&avroEnc{}).long(5).Bytes()), "union branch 5"},
		{"enum index out of range", ocfBytes(t, `{"type":"enum","name":"e","symbols":["A"]}`, "", (&avroEnc{}).long(1).Bytes()), "enum e index 1"},
		{"int out of range", ocfBytes(t, `"int"`, "", (&avroEnc{}).long(1<<40).Bytes()), "out of range"},
		{"string longer than the data", ocfBytes(t, `"string"`, "", (&avroEnc{}).long(1000).Bytes()), "unexpected end"},
		{"a record that only holds itself", ocfBytes(t, `{"type":"record","name":"r","fields":[{"name":"r","type":"r"}]}`, "", nil), "nested too deeply"},
		{"endless nulls", ocfBytes(t, `{"type":"array","items":"null"}`, "", (&avroEnc{}).long(1<<60).Bytes()), "more values than the data can hold"},
	}
	bad := ocfBytes(t, long, "deflate")
	bad = append(bad, (&avroEnc{}).long(1).long(3).raw(0xff, 0xff, 0xff).raw(testSync...).Bytes()...)
	cases = append(cases, struct {
		name string
		data []byte
		want string
	}{"corrupt deflate block", bad, "deflate block"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readOCF(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("readOCF: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// FuzzReadOCF: a container file from outside never panics the decoder, nor makes it
// allocate or loop without bound.
func FuzzReadOCF(f *testing.F) {
	manifestish := `{"type":"record","name":"manifest_entry","fields":[{"name":"status","type":"int"},{"name":"snapshot_id","type":["null","long"]},` +
		`{"name":"data_file","type":{"type":"record","name":"r2","fields":[{"name":"file_path","type":"string"},{"name":"partition","type":{"type":"record","name":"r102","fields":[]}},` +
		`{"name":"column_sizes","type":["null",{"type":"array","items":{"type":"record","name":"k117_v118","fields":[{"name":"key","type":"int"},{"name":"value","type":"long"}]},"logicalType":"map"}]}]}}]}`
	datum := (&avroEnc{}).long(1).long(1).long(99).str("s3://b/k.parquet").long(1).long(1).long(3).long(100).long(0).Bytes()
	for _, codec := range []string{"", "deflate"} {
		f.Add(ocfBytes(f, manifestish, codec, datum, datum))
		f.Add(ocfBytes(f, `{"type":"map","values":["null","double",{"type":"fixed","name":"x","size":3}]}`, codec, (&avroEnc{}).long(1).str("k").long(1).raw(f64(1)...).long(0).Bytes()))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, errA := readOCF(data)
		b, errB := readOCF(data)
		if (errA == nil) != (errB == nil) || (errA == nil && fmt.Sprint(a) != fmt.Sprint(b)) {
			t.Fatalf("decoding the same bytes twice differed: %v / %v", errA, errB)
		}
	})
}
