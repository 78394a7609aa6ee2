package parse

import (
	"os"
	"reflect"
	"testing"

	"github.com/verbsexp/verbsexp/internal/target"
)

// TestConfigCache: a configuration read back from the cache is the one
// the compiler gave, and a changed compiler (here: another cache key)
// is asked again.
func TestConfigCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tg := target.All[0]
	fresh, err := Config(tg)
	if err != nil {
		t.Fatal(err)
	}
	compiler, _ := tg.Compiler()
	file := cacheFile(compiler, tg.GoArch)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no cache entry written: %v", err)
	}
	cached, err := Config(tg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Predefined", "IncludePaths", "SysIncludePaths", "HostIncludePaths", "HostSysIncludePaths", "CC"} {
		a := reflect.ValueOf(*fresh).FieldByName(f).Interface()
		b := reflect.ValueOf(*cached).FieldByName(f).Interface()
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s differs between the compiler's answer and the cache", f)
		}
	}
	if fresh.ABI.Types[0] != cached.ABI.Types[0] || len(fresh.ABI.Types) != len(cached.ABI.Types) {
		t.Error("ABI differs")
	}
	if cacheFile(compiler, "arm64") == file {
		t.Error("two targets share a cache key")
	}
	t.Setenv("VERBSEXP_NO_CONFIG_CACHE", "1")
	if cacheFile(compiler, tg.GoArch) != "" {
		t.Error("VERBSEXP_NO_CONFIG_CACHE does not disable the cache")
	}
}
