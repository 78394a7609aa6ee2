package coll

import (
	"fmt"
	"strings"
)

// nOf spells n things: "1 rank", "2 ranks", "1 memory", "3 memories".
func nOf(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	if strings.HasSuffix(one, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(one, "y"))
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// textError has a complete text of its own and still matches, with
// errors.Is and errors.As, the error it wraps: a sentinel or an inner
// error whose own "coll: …" text would repeat what the outer one says.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }

// rankError is err as rank reports it: "coll: rank R: " and what, said
// once even when err's own text starts with "coll: ".
func rankError(rank int, what string, err error) error {
	return &textError{fmt.Sprintf("coll: rank %d: %s%s", rank, what, strings.TrimPrefix(err.Error(), "coll: ")), err}
}
