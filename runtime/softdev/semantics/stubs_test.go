//go:build linux && cgo

package semantics

func calcCases() []semCase  { return nil }
func rcCases() []semCase    { return nil }
func eventCases() []semCase { return nil }
