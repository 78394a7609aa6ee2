package launch

import (
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// TestDriverSources checks that the driver is built from every C file of
// the engine and the transport (runtime/softdev's engine_*.c and
// transport_*.c) and its own front end, and of nothing else: a file added
// to a layer, or one renamed, changes the list.
func TestDriverSources(t *testing.T) {
	var want []string
	for _, pat := range []string{"engine_*.c", "transport_*.c", "driver/*.c"} {
		m, err := filepath.Glob(filepath.Join("..", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel("..", f)
			want = append(want, filepath.ToSlash(rel))
		}
	}
	got := append([]string(nil), driverSources...)
	sort.Strings(want)
	sort.Strings(got)
	if len(want) < 3 || !reflect.DeepEqual(got, want) {
		t.Errorf("driverSources = %q, want runtime/softdev's engine and transport files and driver/driver.c: %q", got, want)
	}
}
