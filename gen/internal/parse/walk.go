package parse

import (
	"reflect"
	"sync"
)

// nodeFieldCache maps an AST node's struct type to the indices of the
// fields walk descends into.
var nodeFieldCache sync.Map // reflect.Type → []int

// nodeFields returns the indices of t's exported fields that can hold an
// AST node: pointers to node types, and interfaces. walk visits them in
// this (declaration) order; computing them once per type, not once per
// node, takes the reflection out of the walk's inner loop.
func nodeFields(t reflect.Type) []int {
	if f, ok := nodeFieldCache.Load(t); ok {
		return f.([]int)
	}
	var r []int
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Ptr:
			if f.Type.Implements(nodeType) {
				r = append(r, i)
			}
		case reflect.Interface:
			r = append(r, i)
		}
	}
	nodeFieldCache.Store(t, r)
	return r
}
