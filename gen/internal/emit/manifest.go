package emit

import (
	"github.com/verbsexp/verbsexp/internal/manifest"
)

// manifestData builds the manifest from the plans: named records only
// (nested types appear as member paths of their record), every constant,
// every function.
func (in Input) manifestData() *manifest.Manifest {
	m := &manifest.Manifest{
		Version:   manifest.Version,
		Generator: Generator,
		Package:   in.Pkg.Name,
		Inputs:    []manifest.Input{}, // a header declaring nothing in scope: [] (null does not read back)
		Arches:    map[string]*manifest.Arch{},
		Functions: []manifest.Function{},
	}
	for i, p := range in.Pkg.Inputs {
		m.Inputs = append(m.Inputs, manifest.Input{Path: p.Path, SHA256: in.Hashes[i]})
	}
	for i, arch := range in.Pkg.Arches {
		a := &manifest.Arch{Records: []manifest.Record{}, Constants: []manifest.Constant{}}
		for _, p := range in.Plans[i] {
			if p == nil || p.Record.Nested {
				continue
			}
			r := manifest.Record{C: p.Record.C, Go: p.Record.GoName, Size: p.Size, Align: p.Align, Fields: []manifest.Field{}}
			for _, f := range p.Fields {
				mf := manifest.Field{C: f.C, Go: f.Go, Offset: f.Offset, Size: f.Size, Type: f.Type}
				if f.BitSize > 0 {
					off := f.BitOffset
					mf.BitOffset, mf.BitSize = &off, f.BitSize
				}
				r.Fields = append(r.Fields, mf)
			}
			a.Records = append(a.Records, r)
		}
		for _, e := range in.Pkg.Enums {
			for _, c := range e.Values {
				a.Constants = append(a.Constants, manifest.Constant{C: c.C, Go: c.GoName, Value: c.Values[i]})
			}
		}
		for _, c := range in.Pkg.Consts {
			a.Constants = append(a.Constants, manifest.Constant{C: c.C, Go: c.GoName, Value: c.Values[i]})
		}
		m.Arches[arch] = a
	}
	for _, fn := range in.Pkg.Funcs {
		m.Functions = append(m.Functions, manifest.Function{C: fn.C, Go: fn.GoName, Inline: fn.Inline})
	}
	return m
}
