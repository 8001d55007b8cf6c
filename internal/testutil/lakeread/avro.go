package lakeread

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// An Avro object container file (Avro 1.11 spec, "Object Container Files") decoded from its
// own schema: manifests and manifest lists are read without knowing Iceberg's Avro schemas,
// so a writer that gets a field's type or position wrong shows up as a decode error or a
// missing field instead of being read back the way it was written.
//
// Values come out generically: null is nil, boolean bool, int and long int64, float and
// double float64, bytes and fixed []byte, string and enum string, array []any, map and
// record map[string]any, a union its branch's value.

const (
	// maxDepth bounds nesting, which a recursive schema could otherwise make endless
	// without consuming input.
	maxDepth = 64
	// maxBlock bounds one inflated block: no Iceberg manifest comes near it.
	maxBlock = 64 << 20
)

type avroSchema struct {
	kind     string // a primitive name, or record, enum, array, map, fixed, union
	name     string // full name of a named type
	fields   []avroField
	symbols  []string
	items    *avroSchema // array items, map values
	branches []*avroSchema
	size     int
}

type avroField struct {
	name string
	typ  *avroSchema
}

var primitives = map[string]bool{"null": true, "boolean": true, "int": true, "long": true, "float": true, "double": true, "bytes": true, "string": true}

// parseSchema parses a schema's JSON form.
func parseSchema(text []byte) (*avroSchema, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("avro schema: %w", err)
	}
	p := schemaParser{named: map[string]*avroSchema{}}
	return p.parse(v, "", 0)
}

type schemaParser struct {
	named map[string]*avroSchema
}

func fullName(name, namespace string) string {
	if strings.Contains(name, ".") || namespace == "" {
		return name
	}
	return namespace + "." + name
}

func (p *schemaParser) parse(v any, namespace string, depth int) (*avroSchema, error) {
	if depth > maxDepth {
		return nil, errors.New("avro schema nested too deeply")
	}
	switch v := v.(type) {
	case string:
		if primitives[v] {
			return &avroSchema{kind: v}, nil
		}
		if s := p.named[fullName(v, namespace)]; s != nil {
			return s, nil
		}
		if s := p.named[v]; s != nil {
			return s, nil
		}
		return nil, fmt.Errorf("avro schema: unknown type %q", v)
	case []any:
		u := &avroSchema{kind: "union"}
		for _, b := range v {
			s, err := p.parse(b, namespace, depth+1)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, s)
		}
		if len(u.branches) == 0 {
			return nil, errors.New("avro schema: empty union")
		}
		return u, nil
	case map[string]any:
		return p.parseObject(v, namespace, depth)
	}
	return nil, fmt.Errorf("avro schema: unexpected %T", v)
}

func (p *schemaParser) parseObject(v map[string]any, namespace string, depth int) (*avroSchema, error) {
	kind, _ := v["type"].(string)
	if kind == "" {
		// {"type": {...}} wraps another schema.
		if inner, ok := v["type"]; ok {
			return p.parse(inner, namespace, depth+1)
		}
		return nil, errors.New("avro schema: object without a type")
	}
	if primitives[kind] {
		return &avroSchema{kind: kind}, nil // a logical type over a primitive
	}
	s := &avroSchema{kind: kind}
	switch kind {
	case "record", "error", "enum", "fixed":
		name, _ := v["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("avro schema: %s without a name", kind)
		}
		if ns, ok := v["namespace"].(string); ok && !strings.Contains(name, ".") {
			namespace = ns
		}
		s.name = fullName(name, namespace)
		if i := strings.LastIndex(s.name, "."); i >= 0 {
			namespace = s.name[:i]
		}
		// Registered before the fields, so a record may refer to itself.
		p.named[s.name] = s
	}
	switch kind {
	case "record", "error":
		s.kind = "record"
		fields, ok := v["fields"].([]any)
		if !ok {
			return nil, fmt.Errorf("avro schema: record %s without fields", s.name)
		}
		for _, f := range fields {
			fm, ok := f.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("avro schema: record %s: field is %T", s.name, f)
			}
			name, _ := fm["name"].(string)
			t, err := p.parse(fm["type"], namespace, depth+1)
			if err != nil {
				return nil, fmt.Errorf("field %s.%s: %w", s.name, name, err)
			}
			s.fields = append(s.fields, avroField{name: name, typ: t})
		}
	case "enum":
		syms, _ := v["symbols"].([]any)
		for _, x := range syms {
			str, _ := x.(string)
			s.symbols = append(s.symbols, str)
		}
	case "fixed":
		n, ok := v["size"].(json.Number)
		size, err := n.Int64()
		if !ok || err != nil || size < 0 || size > maxBlock {
			return nil, fmt.Errorf("avro schema: fixed %s: bad size %v", s.name, v["size"])
		}
		s.size = int(size)
	case "array", "map":
		key := map[string]string{"array": "items", "map": "values"}[kind]
		t, err := p.parse(v[key], namespace, depth+1)
		if err != nil {
			return nil, fmt.Errorf("avro schema: %s %s: %w", kind, key, err)
		}
		s.items = t
	default:
		return nil, fmt.Errorf("avro schema: unknown type %q", kind)
	}
	return s, nil
}

// avroDecoder reads binary-encoded values. budget bounds the values one file may produce,
// since a null-typed array item costs no input at all.
type avroDecoder struct {
	b      []byte
	budget int
}

var errShort = errors.New("avro: unexpected end of data")

func (d *avroDecoder) long() (int64, error) {
	u, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			return 0, errShort
		}
		return 0, errors.New("avro: varint overflows a long")
	}
	d.b = d.b[n:]
	return int64(u>>1) ^ -int64(u&1), nil
}

func (d *avroDecoder) take(n int64) ([]byte, error) {
	if n < 0 || n > int64(len(d.b)) {
		return nil, errShort
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out, nil
}

// blockCount reads an array or map block's item count; a negative count is followed by
// the block's size in bytes, which is not needed here.
func (d *avroDecoder) blockCount() (int64, error) {
	n, err := d.long()
	if err != nil || n >= 0 {
		return n, err
	}
	if _, err := d.long(); err != nil {
		return 0, err
	}
	if n == -1<<63 {
		return 0, errors.New("avro: bad block count")
	}
	return -n, nil
}

func (d *avroDecoder) value(s *avroSchema, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("avro: value nested too deeply")
	}
	if d.budget--; d.budget < 0 {
		return nil, errors.New("avro: more values than the data can hold")
	}
	switch s.kind {
	case "null":
		return nil, nil
	case "boolean":
		b, err := d.take(1)
		if err != nil {
			return nil, err
		}
		if b[0] > 1 {
			return nil, fmt.Errorf("avro: boolean byte %d", b[0])
		}
		return b[0] == 1, nil
	case "int", "long":
		v, err := d.long()
		if err == nil && s.kind == "int" && int64(int32(v)) != v {
			return nil, fmt.Errorf("avro: int %d out of range", v)
		}
		return v, err
	case "float":
		b, err := d.take(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), nil
	case "double":
		b, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	case "bytes", "string":
		n, err := d.long()
		if err != nil {
			return nil, err
		}
		b, err := d.take(n)
		if err != nil {
			return nil, err
		}
		if s.kind == "string" {
			return string(b), nil
		}
		return bytes.Clone(b), nil
	case "fixed":
		b, err := d.take(int64(s.size))
		return bytes.Clone(b), err
	case "enum":
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(s.symbols)) {
			return nil, fmt.Errorf("avro: enum %s index %d of %d", s.name, i, len(s.symbols))
		}
		return s.symbols[i], nil
	case "union":
		i, err := d.long()
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= int64(len(s.branches)) {
			return nil, fmt.Errorf("avro: union branch %d of %d", i, len(s.branches))
		}
		return d.value(s.branches[i], depth+1)
	case "record":
		out := make(map[string]any, len(s.fields))
		for _, f := range s.fields {
			v, err := d.value(f.typ, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.name, f.name, err)
			}
			out[f.name] = v
		}
		return out, nil
	case "array":
		var out []any
		for {
			n, err := d.blockCount()
			if err != nil || n == 0 {
				return out, err
			}
			for ; n > 0; n-- {
				v, err := d.value(s.items, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
		}
	case "map":
		out := map[string]any{}
		for {
			n, err := d.blockCount()
			if err != nil || n == 0 {
				return out, err
			}
			for ; n > 0; n-- {
				kl, err := d.long()
				if err != nil {
					return nil, err
				}
				k, err := d.take(kl)
				if err != nil {
					return nil, err
				}
				v, err := d.value(s.items, depth+1)
				if err != nil {
					return nil, err
				}
				out[string(k)] = v
			}
		}
	}
	return nil, fmt.Errorf("avro: cannot decode %q", s.kind)
}

var ocfMagic = []byte{'O', 'b', 'j', 1}

// ocf is a decoded object container file.
type ocf struct {
	meta    map[string][]byte // avro.schema, avro.codec and the writer's own keys
	records []any
}

// readOCF decodes a whole object container file.
func readOCF(data []byte) (*ocf, error) {
	if !bytes.HasPrefix(data, ocfMagic) {
		return nil, errors.New("avro: not an object container file")
	}
	d := &avroDecoder{b: data[len(ocfMagic):], budget: 16*len(data) + 1024}
	m, err := d.value(&avroSchema{kind: "map", items: &avroSchema{kind: "bytes"}}, 0)
	if err != nil {
		return nil, fmt.Errorf("avro header: %w", err)
	}
	f := &ocf{meta: map[string][]byte{}}
	for k, v := range m.(map[string]any) {
		f.meta[k] = v.([]byte)
	}
	sc, err := parseSchema(f.meta["avro.schema"])
	if err != nil {
		return nil, err
	}
	codec := string(f.meta["avro.codec"])
	if codec != "" && codec != "null" && codec != "deflate" {
		return nil, fmt.Errorf("avro: codec %q is not supported", codec)
	}
	sync, err := d.take(16)
	if err != nil {
		return nil, fmt.Errorf("avro header: %w", err)
	}
	sync = bytes.Clone(sync)
	for len(d.b) > 0 {
		count, err := d.long()
		if err != nil {
			return nil, fmt.Errorf("avro block: %w", err)
		}
		size, err := d.long()
		if err != nil {
			return nil, fmt.Errorf("avro block: %w", err)
		}
		raw, err := d.take(size)
		if err != nil {
			return nil, fmt.Errorf("avro block of %d bytes: %w", size, err)
		}
		if count < 0 {
			return nil, fmt.Errorf("avro block: count %d", count)
		}
		if codec == "deflate" {
			if raw, err = inflate(raw); err != nil {
				return nil, err
			}
		}
		bd := &avroDecoder{b: raw, budget: d.budget}
		for ; count > 0; count-- {
			v, err := bd.value(sc, 0)
			if err != nil {
				return nil, fmt.Errorf("avro record %d: %w", len(f.records), err)
			}
			f.records = append(f.records, v)
		}
		d.budget = bd.budget
		if len(bd.b) != 0 {
			return nil, fmt.Errorf("avro block: %d bytes after its records", len(bd.b))
		}
		marker, err := d.take(16)
		if err != nil || !bytes.Equal(marker, sync) {
			return nil, errors.New("avro block: sync marker missing")
		}
	}
	return f, nil
}

// inflate undoes the deflate codec: raw deflate (RFC 1951), no zlib or gzip framing.
func inflate(b []byte) ([]byte, error) {
	r := flate.NewReader(bytes.NewReader(b))
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, maxBlock+1))
	if err != nil {
		return nil, fmt.Errorf("avro deflate block: %w", err)
	}
	if len(out) > maxBlock {
		return nil, fmt.Errorf("avro deflate block inflates past %d bytes", maxBlock)
	}
	return out, nil
}
