package emit

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/verbsexp/verbsexp/abiutil"
)

// Go's build cache keys a cgo package on the files of its own directory
// and its flags, not on the headers its preamble includes from an -I
// directory: a header edited in place leaves the compiled package, and
// the layouts its _Static_asserts checked, as they were. It does hash
// every *.h of the package's directory, following symbolic links. So the
// generator writes into the package one link per header it read
// (zhdr_*.h): changing one rebuilds the package, and its guards check
// it. Where the links are not (a module zip or a vendored copy drops
// them; a build from before them), zheaders.go records each header's
// digest and the package checks them at its first call
// (abiutil.Headers).
//
// A header that defers to the system's one of its name (#include_next:
// the project's restatement of MLNX_OFED's headers) is not linked there:
// where MLNX_OFED is not installed that link would dangle, and go vet
// (also the one go test runs) fails on a package holding a dangling
// link. The package checks instead, at its first call, whether that file
// appeared since a build that compiled the restatement.

// HeaderLinkPrefix starts the name of every link the generator writes
// into a package (OutputName); the names end in .h, the files Go hashes.
const HeaderLinkPrefix = "zhdr_"

// HeadersFile is the Go file recording what the package was generated
// from.
const HeadersFile = "zheaders.go"

// SystemInclude is where MLNX_OFED installs its headers: where an entry
// header that defers to the next one of its own name finds it.
const SystemInclude = "/usr/include"

// restatedMacro is defined by the project's restatement of the headers
// when it is the one compiled (headers/infiniband/verbs_exp.h).
const restatedMacro = "VERBSEXP_RESTATED_HEADERS"

// restatedAlone is the preamble's answer to whether this build compiled
// the restatement while the headers it defers to were absent (in the
// generator's C namespace, parse.GeneratedCName).
const restatedAlone = "verbsexp_RESTATED_ALONE"

// Source is what the package records of an input header besides its
// path and digest (Input.Hashes).
type Source struct {
	// Dir is its -I directory as the package names it (relative to the
	// package, or absolute); "" when not known (no -I flag for it in
	// CFlags): then it is neither linked nor checked.
	Dir string
	// Defers is set when it includes the next header of its own name
	// (#include_next): the one installed in SystemInclude, where there is
	// one.
	Defers bool
	// Records are the records of the package it defines, with the
	// digests of their definitions (abiutil.RecordDigests).
	Records []abiutil.RecordDigest
}

// headerLinks are the links into the package: one per input header with
// a known directory, named after its path (zhdr_infiniband_verbs_exp.h),
// in input order (a name taken already gets _2, _3, … before .h).
func (in Input) headerLinks() []File {
	var files []File
	taken := map[string]bool{}
	for i, p := range in.Pkg.Inputs {
		if i >= len(in.Sources) || in.Sources[i].Dir == "" {
			continue
		}
		base, ok := strings.CutSuffix(HeaderLinkPrefix+strings.ReplaceAll(p.Path, "/", "_"), ".h")
		if !ok {
			base += "_h" // it is still hashed only as a .h
		}
		name := base + ".h"
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s_%d.h", base, n)
		}
		taken[name] = true
		files = append(files, File{Name: name, Link: in.Sources[i].Dir + "/" + p.Path})
	}
	return files
}

// installed is the system's header the entry defers to (#include_next),
// if it does and is linked: the one whose restatement the preamble
// reports; else nil.
func (in Input) installed() []string {
	for i, p := range in.Pkg.Inputs {
		if p.Path == in.Entry && i < len(in.Sources) && in.Sources[i].Defers && in.Sources[i].Dir != "" {
			return []string{path.Join(SystemInclude, p.Path)}
		}
	}
	return nil
}

// restatedPreamble tells Go (restatedInit) whether the build compiled
// the restatement of the entry header while its installed namesake was
// absent: such a build predates MLNX_OFED's installation once the file
// exists. Empty unless the entry defers.
func (in Input) restatedPreamble() string {
	inst := in.installed()
	if len(inst) == 0 {
		return ""
	}
	return fmt.Sprintf(`// Whether this build compiled the headers' restatement, %[1]s being absent
// (%[2]s checks it at the first call: it is there once MLNX_OFED is installed).
#if defined(%[3]s) && defined(__has_include)
#if !__has_include(%[4]s)
#define %[5]s 1
#endif
#endif
#ifndef %[5]s
#define %[5]s 0
#endif

`, inst[0], HeadersFile, restatedMacro, strconv.Quote(inst[0]), restatedAlone)
}

// restatedInit reads restatedPreamble's answer into the recorded
// headers (shims.go is the package's cgo file).
func (in Input) restatedInit(f *jen.File) {
	if len(in.installed()) == 0 {
		return
	}
	f.Line()
	f.Comment("The preamble says whether this build compiled the headers' restatement while")
	f.Comment("the installed headers it defers to were absent (" + HeadersFile + ").")
	f.Func().Id("init").Params().Block(
		jen.Id(headersVar).Dot("Restated").Op("=").Qual("C", restatedAlone).Op("!=").Lit(0),
	)
}

// headersVar is the package-level variable of zheaders.go; a wrapper
// reaches it through the exported check, which no parameter can shadow.
const headersVar = "generatedFrom"

// checkHeadersFirst is a wrapper's first statement: nothing is called
// when the headers changed since the package was generated.
func (in Input) checkHeadersFirst(fail func(jen.Code) jen.Code) jen.Code {
	return jen.If(jen.Err().Op(":=").Id(in.HeadersCheck).Call(), jen.Err().Op("!=").Nil()).Block(fail(jen.Err()))
}

// headers renders zheaders.go: what the package was generated from, and
// the exported check every wrapper calls first.
func (in Input) headers() *jen.File {
	f := in.newFile("")
	command := in.GoGenerate
	if command == "" {
		command = in.Command
	}
	f.Commentf("%s reports whether the headers are still those this package was", in.HeadersCheck)
	f.Comment("generated from: nil, or the *abiutil.HeadersError (errors.Is syscall.ESTALE)")
	f.Comment("that every call wrapper returns instead of calling C. Go's build cache does not")
	f.Comment("see headers outside the package: the " + HeaderLinkPrefix + "*.h links beside this file make it")
	f.Comment("see them; where they are missing (a module zip, a vendored copy), a header")
	f.Comment("changed in place after a build would leave the compiled package, and what its")
	f.Comment("build guards checked, as they were. The headers are read once, at the first call.")
	f.Func().Id(in.HeadersCheck).Params().Error().Block(jen.Return(jen.Id(headersVar).Dot("Err").Call()))
	f.Line()
	f.Comment(headersVar + " is each header read, from its -I directory as this package names it, with")
	f.Comment("its SHA-256 and the digest of each record of the package it defines.")
	fields := []jen.Code{
		jen.Id("Package").Op(":").Lit(in.Pkg.Name),
		jen.Id("Command").Op(":").Lit(command),
		jen.Id("Here").Op(":").Id("generatedHere"),
	}
	var files []jen.Code
	for i, p := range in.Pkg.Inputs {
		var src Source
		if i < len(in.Sources) {
			src = in.Sources[i]
		}
		var recs []jen.Code
		for _, r := range src.Records {
			recs = append(recs, jen.Values(jen.Id("Name").Op(":").Lit(r.Name), jen.Id("Digest").Op(":").Lit(r.Digest)))
		}
		files = append(files, jen.Values(
			jen.Id("Dir").Op(":").Lit(src.Dir),
			jen.Id("Path").Op(":").Lit(p.Path),
			jen.Id("SHA256").Op(":").Lit(in.Hashes[i]),
			jen.Id("Records").Op(":").Index().Qual(AbiutilPath, "RecordDigest").ValuesFunc(func(g *jen.Group) {
				for _, r := range recs {
					g.Line().Add(r)
				}
				if len(recs) > 0 {
					g.Line()
				}
			}),
		))
	}
	fields = append(fields, jen.Id("Files").Op(":").Index().Qual(AbiutilPath, "HeaderFile").ValuesFunc(func(g *jen.Group) {
		for _, x := range files {
			g.Line().Add(x)
		}
		if len(files) > 0 {
			g.Line()
		}
	}))
	if inst := in.installed(); len(inst) > 0 {
		fields = append(fields, jen.Id("Installed").Op(":").Index().String().ValuesFunc(func(g *jen.Group) {
			for _, p := range inst {
				g.Lit(p)
			}
		}))
	}
	f.Var().Id(headersVar).Op("=").Qual(AbiutilPath, "Headers").ValuesFunc(func(g *jen.Group) {
		for _, x := range fields {
			g.Line().Add(x)
		}
		g.Line()
	})
	f.Line()
	f.Comment("generatedHere is this file's path as compiled: the package's directory at build time.")
	f.Func().Id("generatedHere").Params().String().Block(
		jen.List(jen.Id("_"), jen.Id("file"), jen.Id("_"), jen.Id("_")).Op(":=").Qual("runtime", "Caller").Call(jen.Lit(0)),
		jen.Return(jen.Id("file")),
	)
	return f
}

// linksDoc is the package doc's sentence on the header links ("" when
// there are none).
func (in Input) linksDoc() string {
	if len(in.headerLinks()) == 0 {
		return ""
	}
	return fmt.Sprintf(`

The %s*.h files are symbolic links to the headers the package was generated
from, so that Go's build cache rebuilds it, and its guards check them again,
when one changes; where they are missing, %s reports the change at the
first call.`, HeaderLinkPrefix, in.HeadersCheck)
}
