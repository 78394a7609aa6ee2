package parse

import (
	"fmt"
	"path/filepath"
	"strings"

	"modernc.org/cc/v4"

	"github.com/verbsexp/verbsexp/internal/inputfile"
)

// GCC layout attributes that cc/v4 (v4.34.0) parses but does not apply
// as gcc does where the generator meets them, each found by comparing
// the two on amd64, arm64 and ppc64le (gen check, TestLayoutAttributes):
//
//   - mode on a typedef or member: glibc's register_t, int
//     __attribute__((mode(word))), is 8 bytes to gcc, 4 to cc;
//   - vector_size after a member's declarator: gcc aligns a 16-byte
//     vector to 16, cc lays out a plain int;
//   - aligned without an alignment, on a record, typedef or member: gcc
//     aligns to the target's largest alignment (16 bytes), cc ignores it;
//   - aligned(N) in a bit-field's declaration: gcc aligns the bit-field's
//     unit (struct { int a:3 __attribute__((aligned(8))); } is 8 bytes),
//     cc ignores it;
//   - scalar_storage_order("big-endian") on a record: gcc stores its
//     scalars byte-swapped and numbers its bit-fields from the other end;
//   - ms_struct on a record: Microsoft's bit-field rules (a struct of
//     char:4, int:4, char:4 is 12 bytes to gcc on amd64, 4 to cc).
//
// A layout built on them would be wrong, so the members and records they
// touch are marked (Type.Unsupported, Record.Unsupported) and layout
// refuses them with their position: the package is never generated with
// a wrong layout.

// unsupportedAttributes say, for each attribute refused wherever it is
// met, what gcc does that the C front end does not.
var unsupportedAttributes = map[string]string{
	"mode":        "gcc sets the integer's size by it: register_t is 8 bytes",
	"vector_size": "gcc aligns a vector to its size",
}

// attribute is one GCC attribute of an __attribute__((…)) list.
type attribute struct {
	name string   // without __ around it: aligned for __aligned__
	raw  string   // as written
	args []string // the argument tokens, nil without parentheses
}

// attributes lists the GCC attributes among the tokens of the nodes.
func attributes(nodes ...cc.Node) []attribute {
	var r []attribute
	for _, n := range nodes {
		toks := cc.NodeTokens(n)
		for i := 0; i < len(toks); i++ {
			if s := toks[i].SrcStr(); s != "__attribute__" && s != "__attribute" {
				continue
			}
			// __attribute__ ( ( name [ ( args ) ] , … ) )
			depth := 0
			for i++; i < len(toks); i++ {
				s := toks[i].SrcStr()
				switch {
				case s == "(":
					depth++
				case s == ")":
					depth--
				case depth == 2 && s != ",":
					a := attribute{name: strings.TrimSuffix(strings.TrimPrefix(s, "__"), "__"), raw: s}
					if i+1 < len(toks) && toks[i+1].SrcStr() == "(" {
						a.args = []string{}
						d := 0
						for i++; i < len(toks); i++ {
							t := toks[i].SrcStr()
							if t == "(" {
								d++
							} else if t == ")" {
								if d--; d == 0 {
									break
								}
							}
							if d > 1 || d == 1 && t != "(" {
								a.args = append(a.args, t)
							}
						}
					}
					r = append(r, a)
				}
				if depth == 0 {
					break
				}
			}
		}
	}
	return r
}

// unsupported describes the first attribute of attrs the generator
// cannot lay out, "" for none: the attribute as written, and what gcc
// does with it. bitField says the attributes are a bit-field's.
func unsupported(attrs []attribute, bitField bool) string {
	for _, a := range attrs {
		switch {
		case unsupportedAttributes[a.name] != "":
			return fmt.Sprintf("__attribute__((%s)) (%s)", a.raw, unsupportedAttributes[a.name])
		case a.name == "aligned" && a.args == nil:
			return fmt.Sprintf("__attribute__((%s)) without an alignment (gcc aligns to the target's largest, 16 bytes: write %[1]s(16) instead)", a.raw)
		case a.name == "aligned" && bitField:
			return fmt.Sprintf("__attribute__((%s(%s))) on a bit-field (gcc aligns the bit-field's storage unit by it)", a.raw, strings.Join(a.args, ""))
		}
	}
	return ""
}

// recordUnsupported is unsupported for the attributes of a record's own
// declaration (cc/v4 keeps them, unapplied, on its type).
func recordUnsupported(t cc.Type) string {
	a := t.Attributes()
	if a == nil {
		return ""
	}
	for _, n := range []string{"scalar_storage_order", "__scalar_storage_order__"} {
		for _, v := range a.AttrValue(n) {
			if s, ok := v.(cc.StringValue); ok && strings.TrimRight(string(s), "\x00") == "big-endian" {
				return `__attribute__((scalar_storage_order("big-endian"))) (gcc stores its scalars byte-swapped and numbers its bit-fields from the other end)`
			}
		}
	}
	if a.IsAttrSet("ms_struct") || a.IsAttrSet("__ms_struct__") {
		return "__attribute__((ms_struct)) (gcc lays its bit-fields out by Microsoft's rules)"
	}
	for _, n := range []string{"aligned", "__aligned__"} {
		if a.IsAttrSet(n) && len(a.AttrValue(n)) == 0 {
			return "__attribute__((aligned)) without an alignment (gcc aligns to the target's largest, 16 bytes: write aligned(16) instead)"
		}
	}
	return ""
}

// pragma is the translation's cc.Config.PragmaHandler (cc/v4 applies
// pack itself, and ignores the rest): #pragma scalar_storage_order
// big-endian, which gcc applies to every record that follows, is
// refused where it stands.
func (s sourceFS) pragma(toks []cc.Token) error {
	if len(toks) < 2 || toks[0].SrcStr() != "scalar_storage_order" {
		return nil
	}
	var arg strings.Builder // big-endian is three tokens
	for _, t := range toks[1:] {
		arg.WriteString(t.SrcStr())
	}
	if arg.String() != "big-endian" {
		return nil
	}
	p := toks[0].Position()
	where := fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
	if !filepath.IsAbs(p.Filename) {
		// From _Pragma in a macro: cc/v4 gives no position in a file.
		where = s.locate("scalar_storage_order") + ": _Pragma in a macro"
	}
	s.refuse(fmt.Errorf("%s: #pragma scalar_storage_order big-endian: gcc stores the scalars of every record after it byte-swapped and numbers their bit-fields from the other end, which the C front end the generator uses does not do: the generator refuses it rather than emit wrong layouts", where))
	return nil
}

// locate returns file:line of the first line of the headers read so far
// in the -I directories that contains word, or the entry's name.
func (s sourceFS) locate(word string) string {
	for _, rel := range s.readPaths() {
		for _, d := range s.dirs {
			b, err := inputfile.Read(filepath.Join(d, rel), maxHeaderBytes, "")
			if err != nil {
				continue
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, word) {
					return fmt.Sprintf("%s:%d", filepath.Join(d, rel), i+1)
				}
			}
			break
		}
	}
	return "the headers"
}

// markTypedefs records the typedefs, anywhere in the unit (system headers
// too: glibc's register_t), whose declaration carries an attribute the
// generator cannot lay out.
func (x *extractor) markTypedefs(tu *cc.TranslationUnit) {
	for ; tu != nil; tu = tu.TranslationUnit {
		ed := tu.ExternalDeclaration
		if ed == nil || ed.Declaration == nil || ed.Declaration.InitDeclaratorList == nil {
			continue
		}
		d := ed.Declaration
		if !isTypedef(d.DeclarationSpecifiers) {
			continue
		}
		nodes := specifierAttrs(d.DeclarationSpecifiers)
		if d.AttributeSpecifierList != nil {
			nodes = append(nodes, d.AttributeSpecifierList)
		}
		why := unsupported(attributes(append(nodes, d.InitDeclaratorList)...), false)
		if why == "" {
			continue
		}
		for l := d.InitDeclaratorList; l != nil; l = l.InitDeclaratorList {
			if l.InitDeclarator != nil && l.InitDeclarator.Declarator != nil {
				x.ignored[l.InitDeclarator.Declarator] = why
			}
		}
	}
}

// specifierAttrs is the parts of a declaration's specifiers that may
// carry attributes, but not the body of a record they define (its
// members are markMembers', its own attributes recordUnsupported's).
func specifierAttrs(ds *cc.DeclarationSpecifiers) []cc.Node {
	var r []cc.Node
	for ; ds != nil; ds = ds.DeclarationSpecifiers {
		if ds.AttributeSpecifierList != nil {
			r = append(r, ds.AttributeSpecifierList)
		}
		if ds.TypeQualifier != nil {
			r = append(r, ds.TypeQualifier)
		}
		if ts := ds.TypeSpecifier; ts != nil && (ts.StructOrUnionSpecifier == nil || ts.StructOrUnionSpecifier.Case != cc.StructOrUnionSpecifierDef) {
			r = append(r, ts)
		}
	}
	return r
}

func isTypedef(ds *cc.DeclarationSpecifiers) bool {
	for ; ds != nil; ds = ds.DeclarationSpecifiers {
		if sc := ds.StorageClassSpecifier; sc != nil && sc.Case == cc.StorageClassSpecifierTypedef {
			return true
		}
	}
	return false
}

// markMembers records the member declarators of a record definition (and
// of the unnamed records defined in it) whose declaration carries an
// attribute the generator cannot lay out, and records the record itself
// when an unnamed bit-field does.
func (x *extractor) markMembers(n *cc.StructOrUnionSpecifier) {
	for l := n.StructDeclarationList; l != nil; l = l.StructDeclarationList {
		sd := l.StructDeclaration
		if sd == nil {
			continue
		}
		var specAttrs []cc.Node
		for q := sd.SpecifierQualifierList; q != nil; q = q.SpecifierQualifierList {
			if q.AttributeSpecifierList != nil {
				specAttrs = append(specAttrs, q.AttributeSpecifierList)
			}
			if q.TypeQualifier != nil { // where cc/v4 puts a leading __attribute__
				specAttrs = append(specAttrs, q.TypeQualifier)
			}
			if ts := q.TypeSpecifier; ts != nil && ts.StructOrUnionSpecifier != nil && ts.StructOrUnionSpecifier.Case == cc.StructOrUnionSpecifierDef {
				x.markMembers(ts.StructOrUnionSpecifier)
			}
		}
		if sd.AttributeSpecifierList != nil {
			specAttrs = append(specAttrs, sd.AttributeSpecifierList)
		}
		shared := attributes(specAttrs...)
		for dl := sd.StructDeclaratorList; dl != nil; dl = dl.StructDeclaratorList {
			sdr := dl.StructDeclarator
			if sdr == nil {
				continue
			}
			bitField := sdr.ConstantExpression != nil
			var own []attribute
			if sdr.Declarator != nil {
				own = attributes(sdr.Declarator)
			}
			why := unsupported(append(append([]attribute(nil), shared...), own...), bitField)
			switch {
			case why == "":
			case sdr.Declarator != nil:
				x.ignored[sdr.Declarator] = why
			default:
				p := sd.Position()
				x.ignoredUnnamed[n.Type()] = unnamedAttr{why, p.Line, p.Column}
			}
		}
	}
}

// unnamedAttr is an unsupported attribute of an unnamed bit-field: there
// is no member to refuse, so its record is refused, at its position.
type unnamedAttr struct {
	why       string
	line, col int
}

// ignoredIn returns the unsupported attribute behind t (its typedefs,
// followed), or "".
func (x *extractor) ignoredIn(t cc.Type) string {
	seen := 0
	for td := t.Typedef(); td != nil && seen < 16; seen++ {
		if a := x.ignored[td]; a != "" {
			return a
		}
		next := td.Type().Typedef()
		if next == td {
			break
		}
		td = next
	}
	return ""
}
