// Package manifest defines abi.json, the pinned ABI of a generated package:
// for every target, every record's size, alignment and reachable members
// (offset, size, bit position), every constant's value, and the functions.
// Tests and users' CI compare it with the C compiler and with earlier
// releases.
package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/verbsexp/verbsexp/internal/cint"
	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// Version is the schema version; readers refuse manifests of another one.
const Version = 1

// Manifest is the whole of abi.json.
type Manifest struct {
	Version   int              `json:"version"`
	Generator string           `json:"generator"`
	Package   string           `json:"package"`
	Inputs    []Input          `json:"inputs"`
	Arches    map[string]*Arch `json:"arches"`
	Functions []Function       `json:"functions"`
}

// Input is a header the package was generated from.
type Input struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Arch is the ABI on one target.
type Arch struct {
	Records   []Record   `json:"records"`
	Constants []Constant `json:"constants"`
}

// Record is a C struct or union and its Go type.
type Record struct {
	C      string  `json:"c"`
	Go     string  `json:"go"`
	Size   int64   `json:"size"`
	Align  int64   `json:"align"`
	Fields []Field `json:"fields"`
}

// Field is a member reachable with C member syntax.
type Field struct {
	C         string `json:"c"`
	Go        string `json:"go"`
	Offset    int64  `json:"offset"`
	Size      int64  `json:"size"`
	BitOffset *int64 `json:"bit_offset,omitempty"`
	BitSize   int    `json:"bit_size,omitempty"`
	// Type is the Go type the path yields (optional: manifests written
	// before it existed lack it, and then it is not compared).
	Type string `json:"type,omitempty"`
}

// Constant is an enumerator or an integer #define.
type Constant struct {
	C     string     `json:"c"`
	Go    string     `json:"go"`
	Value cint.Value `json:"value"`
}

// Function is a function declared in scope.
type Function struct {
	C      string `json:"c"`
	Go     string `json:"go"`
	Inline bool   `json:"inline"`
}

// Marshal renders m as indented JSON with a final newline; map keys are
// sorted by encoding/json, so the bytes are deterministic.
func Marshal(m *Manifest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// MaxBytes bounds the manifests Read reads: the real headers' is ~0.7
// MiB, the 100 000-enumerator test's ~8 MiB; decoding takes ~10 bytes of
// memory per byte.
const MaxBytes = 256 << 20

// Read loads and validates a manifest file: a regular file of at most
// MaxBytes (a FIFO or a device is refused before any read).
func Read(path string) (*Manifest, error) {
	b, err := inputfile.Read(path, MaxBytes, "a manifest gen writes is far smaller; is it an abi.json?")
	if err != nil {
		return nil, err
	}
	m, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return m, nil
}

// Unmarshal parses and validates manifest bytes.
func Unmarshal(b []byte) (*Manifest, error) {
	var m Manifest
	if !json.Valid(b) {
		err := json.Unmarshal(b, new(any))
		if se, ok := err.(*json.SyntaxError); ok {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("line %d: not valid JSON: %v", line, err)
		}
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		if se, ok := err.(*json.SyntaxError); ok {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("line %d: not valid JSON: %v", line, err)
		}
		return nil, fmt.Errorf("not a manifest: %v", err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("manifest version %d, this generator reads version %d: regenerate it with this generator", m.Version, Version)
	}
	if m.Arches == nil {
		return nil, fmt.Errorf(`missing required key "arches"`)
	}
	if m.Inputs == nil {
		return nil, fmt.Errorf(`missing required key "inputs"`)
	}
	if err := checkStrings(&m); err != nil {
		return nil, err
	}
	for name, a := range m.Arches {
		if a == nil {
			return nil, fmt.Errorf("arches.%s is null", name)
		}
		// The differ matches by C name and reports changes by it: a name
		// missing or listed twice would make a manifest differ from itself
		// or a change nobody can acknowledge (found by FuzzCompare).
		recs := map[string]bool{}
		for i, r := range a.Records {
			if r.C == "" || r.Go == "" {
				return nil, fmt.Errorf("arches.%s.records[%d]: missing c or go", name, i)
			}
			if recs[r.C] {
				return nil, fmt.Errorf("arches.%s.records[%d]: %s listed twice", name, i, r.C)
			}
			recs[r.C] = true
			fields := map[string]bool{}
			for j, f := range r.Fields {
				if f.C == "" || f.Go == "" {
					return nil, fmt.Errorf("arches.%s.records[%d].fields[%d]: missing c or go", name, i, j)
				}
				if fields[f.C] {
					return nil, fmt.Errorf("arches.%s.records[%d].fields[%d]: %s.%s listed twice", name, i, j, r.C, f.C)
				}
				fields[f.C] = true
			}
		}
		consts := map[string]bool{}
		for i, c := range a.Constants {
			if c.C == "" || c.Go == "" {
				return nil, fmt.Errorf("arches.%s.constants[%d]: missing c or go", name, i)
			}
			if consts[c.C] {
				return nil, fmt.Errorf("arches.%s.constants[%d]: %q listed twice", name, i, c.C)
			}
			consts[c.C] = true
		}
	}
	funcs := map[string]bool{}
	for i, f := range m.Functions {
		if f.C == "" || f.Go == "" {
			return nil, fmt.Errorf("functions[%d]: missing c or go", i)
		}
		if funcs[f.C] {
			return nil, fmt.Errorf("functions[%d]: %q listed twice", i, f.C)
		}
		funcs[f.C] = true
	}
	return &m, nil
}
