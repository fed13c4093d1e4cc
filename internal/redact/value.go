package redact

import (
	"encoding/json"
	"reflect"
)

// Value is v with the secrets masked in every string it holds (in exported
// struct fields, slices, arrays, maps, pointers and interfaces; byte slices
// count as strings, a json.RawMessage only where masking leaves it valid
// JSON), and whether it held any. What holds no secret is returned as it
// is; what does is a copy, so v itself is never changed. For an activity's
// result, which the workflow keeps in its history.
func Value[T any](r *Redactor, v T) (T, bool) {
	if r == nil {
		return v, false
	}
	rv := reflect.ValueOf(&v).Elem()
	if out, ok := r.value(rv); ok {
		return out.Interface().(T), true
	}
	return v, false
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

// value returns v with its secrets masked, and whether there were any (v
// itself otherwise).
func (r *Redactor) value(v reflect.Value) (reflect.Value, bool) {
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if red := r.String(s); red != s {
			out := reflect.New(v.Type()).Elem()
			out.SetString(red)
			return out, true
		}
	case reflect.Slice:
		if v.IsNil() {
			return v, false
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b := v.Bytes()
			red := r.String(string(b))
			if red == string(b) || (v.Type() == rawMessage && !json.Valid([]byte(red))) {
				return v, false
			}
			out := reflect.New(v.Type()).Elem()
			out.SetBytes([]byte(red))
			return out, true
		}
		return r.elements(v, func() reflect.Value {
			out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(out, v)
			return out
		})
	case reflect.Array:
		return r.elements(v, func() reflect.Value {
			out := reflect.New(v.Type()).Elem()
			out.Set(v)
			return out
		})
	case reflect.Map:
		if v.IsNil() {
			return v, false
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		changed := false
		for it := v.MapRange(); it.Next(); {
			k, kc := r.value(it.Key())
			e, ec := r.value(it.Value())
			changed = changed || kc || ec
			out.SetMapIndex(k, e)
		}
		if changed {
			return out, true
		}
	case reflect.Pointer:
		if v.IsNil() {
			return v, false
		}
		if e, changed := r.value(v.Elem()); changed {
			out := reflect.New(v.Type().Elem())
			out.Elem().Set(e)
			return out, true
		}
	case reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		if e, changed := r.value(v.Elem()); changed {
			out := reflect.New(v.Type()).Elem()
			out.Set(e)
			return out, true
		}
	case reflect.Struct:
		var out reflect.Value
		t := v.Type()
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue // copied as it is with the struct
			}
			f, changed := r.value(v.Field(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.New(t).Elem()
				out.Set(v)
			}
			out.Field(i).Set(f)
		}
		if out.IsValid() {
			return out, true
		}
	}
	return v, false
}

// elements masks each element of the slice or array v; at the first that
// changes it copies v (clone), so v itself is never changed.
func (r *Redactor) elements(v reflect.Value, clone func() reflect.Value) (reflect.Value, bool) {
	var out reflect.Value
	for i := range v.Len() {
		e, changed := r.value(v.Index(i))
		if !changed {
			continue
		}
		if !out.IsValid() {
			out = clone()
		}
		out.Index(i).Set(e)
	}
	if !out.IsValid() {
		return v, false
	}
	return out, true
}
