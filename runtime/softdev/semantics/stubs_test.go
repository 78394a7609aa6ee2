//go:build linux && cgo

package semantics

func rcCases() []semCase    { return nil }
func eventCases() []semCase { return nil }
