package otlp

import (
	"reflect"
	"testing"
)

// TestTablesFitTheModel checks what the compiler cannot about the tables: that
// every field's offset, in the model its message lands in, is a member of the
// type its kind stores (the setters write through unsafe pointers), that a
// oneof's tag is a byte, and that no message has a field number or JSON name
// twice.
func TestTablesFitTheModel(t *testing.T) {
	type visit struct {
		m     *message
		model reflect.Type
	}
	seen := map[visit]bool{}
	var walk func(name string, m *message, model reflect.Type)
	walk = func(name string, m *message, model reflect.Type) {
		if seen[visit{m, model}] {
			return
		}
		seen[visit{m, model}] = true
		nums, names := map[int32]bool{}, map[string]bool{}
		for i := range m.fields {
			f := &m.fields[i]
			at := name + "." + f.json
			if nums[f.num] {
				t.Errorf("%s: field number %d twice", at, f.num)
			}
			nums[f.num] = true
			for _, n := range []string{f.json, snakeCase(f.json)} {
				if names[n] && n != f.json {
					t.Errorf("%s: JSON name %q twice", at, n)
				}
				names[n] = true
			}
			if k, g := m.byNumber(f.num); k != f.kind || g != f {
				t.Errorf("%s: number %d finds another field", at, f.num)
			}
			if m.byName([]byte(snakeCase(f.json))) != f {
				t.Errorf("%s: its snake_case name finds another field", at)
			}
			if f.tagged {
				if tt := typeAt(model, f.tagOff); tt == nil || tt.Size() != 1 {
					t.Errorf("%s: tag at %d of %v is %v, want a byte", at, f.tagOff, model, tt)
				}
			}
			if (f.kind == kEnum) != (f.enum != nil) {
				t.Errorf("%s: enum names only for enums", at)
			}
			if f.kind != kMessage {
				if want := storedTypes[f.kind]; want != nil && !fits(model, f.off, want) {
					t.Errorf("%s: %v at %d of %v, want one of %v", at, typeAt(model, f.off), f.off, model, want)
				}
				continue
			}
			var child reflect.Type
			switch f.elem {
			case inPlace:
				child = model
				if f.off != 0 {
					child = typeAt(model, f.off)
				}
			case newNode:
				if !fits(model, f.off, []reflect.Type{typeOf[list]()}) {
					t.Errorf("%s: no list at %d of %v", at, f.off, model)
				}
				child = typeOf[node]()
			case bodyNode:
				if !fits(model, f.off, []reflect.Type{typeOf[int32]()}) {
					t.Errorf("%s: no node index at %d of %v", at, f.off, model)
				}
				child = typeOf[node]()
			default:
				child = elemModel[f.elem]
				if parent := elemParent[f.elem]; parent != nil && parent != model {
					t.Errorf("%s: %v appended to %v, want to %v", at, child, model, parent)
				}
			}
			if child == nil {
				t.Errorf("%s: no model", at)
				continue
			}
			walk(name+"."+f.json, f.sub, child)
		}
	}
	walk("logs", logsRequest, nil)
	walk("traces", tracesRequest, nil)
	walk("metrics", metricsRequest, nil)
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// elemModel is the model the fields of a message made by e land in, and
// elemParent the model of the message that holds it, when e needs one.
var (
	elemModel = map[elem]reflect.Type{
		emptied: typeOf[node](), newResource: typeOf[list](), newGroup: typeOf[group](),
		newLog: typeOf[logRecord](), newSpan: typeOf[span](), newEvent: typeOf[event](), newLink: typeOf[link](),
		newMetric: typeOf[metric](), newData: typeOf[metric](), newPoint: typeOf[point](),
		newExemplar: typeOf[exemplar](), newQuantile: typeOf[[2]float64](),
	}
	elemParent = map[elem]reflect.Type{
		emptied: typeOf[node](), newLog: typeOf[group](), newSpan: typeOf[group](), newMetric: typeOf[group](),
		newEvent: typeOf[span](), newLink: typeOf[span](), newData: typeOf[metric](), newPoint: typeOf[metric](),
		newExemplar: typeOf[point](), newQuantile: typeOf[point](),
	}
)

// storedTypes are the Go types each kind's setter may write.
var storedTypes = map[kind][]reflect.Type{
	kFixed64: {typeOf[uint64]()}, kSfixed64: {typeOf[uint64]()}, kInt64: {typeOf[uint64]()}, kBool64: {typeOf[uint64]()},
	kDouble: {typeOf[uint64](), typeOf[float64]()},
	kUint32: {typeOf[uint32]()}, kFixed32: {typeOf[uint32]()},
	kInt32: {typeOf[int32]()}, kSint32: {typeOf[int32]()}, kEnum: {typeOf[int32]()},
	kBool:   {typeOf[bool]()},
	kString: {typeOf[[]byte]()}, kBytes: {typeOf[[]byte]()}, kStrValue: {typeOf[[]byte]()},
	kTraceID: {typeOf[[16]byte]()}, kSpanID: {typeOf[[8]byte]()},
	kFixed64s: {typeOf[span32]()}, kDoubles: {typeOf[span32]()}, kVarints: {typeOf[span32]()},
}

// typeAt is the type of what starts at byte off of a value of type t: the
// outermost struct field there, or an array element.
func typeAt(t reflect.Type, off uintptr) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.Offset == off {
				return f.Type
			}
		}
	case reflect.Array:
		if e := t.Elem(); off%e.Size() == 0 && off/e.Size() < uintptr(t.Len()) {
			return e
		}
	}
	return nil
}

// fits reports whether a value of one of the types want is at byte off of t,
// or t itself is one when off is 0.
func fits(t reflect.Type, off uintptr, want []reflect.Type) bool {
	for _, w := range want {
		if off == 0 && t == w || typeAt(t, off) == w {
			return true
		}
	}
	return false
}
