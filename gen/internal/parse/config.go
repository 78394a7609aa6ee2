package parse

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/internal/target"
)

// configMu serialises cc.NewConfig, which reads the compiler from $CC.
var configMu sync.Mutex

// compilerFacts is what cc.NewConfig learns by running a compiler twice
// (predefined macros, include paths). It depends only on the compiler, so
// it is kept in the user's cache directory, keyed by the compiler's path,
// size and modification time: a changed compiler is asked again.
type compilerFacts struct {
	Predefined                            string
	IncludePaths, SysIncludePaths         []string
	HostIncludePaths, HostSysIncludePaths []string
}

// Config returns t's C compiler configuration: its predefined macros and
// include paths, from the cache or by asking the compiler.
func Config(t target.Target) (*cc.Config, error) {
	compiler, err := t.Compiler()
	if err != nil {
		return nil, err
	}
	abi, err := cc.NewABI("linux", t.GoArch)
	if err != nil {
		return nil, err
	}
	file := cacheFile(compiler, t.GoArch)
	if f, ok := readFacts(file); ok {
		cfg := &cc.Config{ABI: abi, CC: compiler, Predefined: f.Predefined,
			IncludePaths: f.IncludePaths, SysIncludePaths: f.SysIncludePaths,
			HostIncludePaths: f.HostIncludePaths, HostSysIncludePaths: f.HostSysIncludePaths}
		if err := cfg.ApplyOptions(); err == nil {
			return cfg, nil
		}
	}
	cfg, err := askCompiler(t, compiler)
	if err != nil {
		return nil, err
	}
	writeFacts(file, compilerFacts{cfg.Predefined, cfg.IncludePaths, cfg.SysIncludePaths, cfg.HostIncludePaths, cfg.HostSysIncludePaths})
	return cfg, nil
}

func askCompiler(t target.Target, compiler string) (*cc.Config, error) {
	configMu.Lock()
	defer configMu.Unlock()
	old, had := os.LookupEnv("CC")
	os.Setenv("CC", compiler)
	defer func() {
		if had {
			os.Setenv("CC", old)
		} else {
			os.Unsetenv("CC")
		}
	}()
	cfg, err := cc.NewConfig("linux", t.GoArch)
	if err != nil {
		return nil, fmt.Errorf("linux/%s: asking %s for its configuration: %v", t.GoArch, compiler, err)
	}
	return cfg, nil
}

// cacheFile names the cache entry of a compiler, or "" when there is no
// cache directory or the compiler cannot be stat'ed (then it is asked).
func cacheFile(compiler, goarch string) string {
	if os.Getenv("VERBSEXP_NO_CONFIG_CACHE") != "" {
		return ""
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(compiler)
	if err != nil {
		return ""
	}
	fi, err := os.Stat(real)
	if err != nil {
		return ""
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("v1 %s %s %d %d", goarch, real, fi.Size(), fi.ModTime().UnixNano())))
	return filepath.Join(dir, "verbsexp", "cc-"+hex.EncodeToString(h[:12])+".json")
}

func readFacts(file string) (compilerFacts, bool) {
	var f compilerFacts
	if file == "" {
		return f, false
	}
	b, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(b, &f) != nil || f.Predefined == "" {
		return f, false
	}
	return f, true
}

// writeFacts stores the facts, atomically; a failure only costs the next
// run the compiler calls.
func writeFacts(file string, f compilerFacts) {
	if file == "" {
		return
	}
	b, err := json.Marshal(f)
	if err != nil || os.MkdirAll(filepath.Dir(file), 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".cc-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	if tmp.Close() != nil || werr != nil || os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
	}
}
