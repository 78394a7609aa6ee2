package parse

import (
	"modernc.org/cc/v4"
)

// ignoredAttributes are the GCC attributes cc/v4 (v4.34.0) parses but
// does not apply to the layout where the generator meets them: mode on a
// typedef or member (gcc's register_t, int __attribute__((mode(word))),
// is 8 bytes, cc says 4) and vector_size after a member's declarator
// (gcc: a 16-byte vector aligned to 16, cc: a plain int). A layout built
// on them would be wrong, so the members they touch are marked
// (Type.Unsupported) and layout refuses them with their position; the
// package is never generated with a wrong layout.
var ignoredAttributes = map[string]bool{"mode": true, "__mode__": true, "vector_size": true, "__vector_size__": true}

// ignoredAttribute returns the first attribute of ignoredAttributes in an
// __attribute__ among the tokens of the nodes, or "".
func ignoredAttribute(nodes ...cc.Node) string {
	for _, n := range nodes {
		inAttr := false
		for _, t := range cc.NodeTokens(n) {
			switch s := t.SrcStr(); {
			case s == "__attribute__" || s == "__attribute":
				inAttr = true
			case inAttr && ignoredAttributes[s]:
				return s
			}
		}
	}
	return ""
}

// markTypedefs records the typedefs, anywhere in the unit (system headers
// too: glibc's register_t), whose declaration carries an ignored
// attribute.
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
		attr := ignoredAttribute(d.DeclarationSpecifiers, d.AttributeSpecifierList, d.InitDeclaratorList)
		if attr == "" {
			continue
		}
		for l := d.InitDeclaratorList; l != nil; l = l.InitDeclaratorList {
			if l.InitDeclarator != nil && l.InitDeclarator.Declarator != nil {
				x.ignored[l.InitDeclarator.Declarator] = attr
			}
		}
	}
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
// ignored attribute.
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
			if ts := q.TypeSpecifier; ts != nil && ts.StructOrUnionSpecifier != nil && ts.StructOrUnionSpecifier.Case == cc.StructOrUnionSpecifierDef {
				x.markMembers(ts.StructOrUnionSpecifier)
			}
		}
		attr := ignoredAttribute(append(specAttrs, sd.AttributeSpecifierList)...)
		for dl := sd.StructDeclaratorList; dl != nil; dl = dl.StructDeclaratorList {
			sdr := dl.StructDeclarator
			if sdr == nil || sdr.Declarator == nil {
				continue
			}
			a := attr
			if a == "" {
				a = ignoredAttribute(sdr.Declarator)
			}
			if a != "" {
				x.ignored[sdr.Declarator] = a
			}
		}
	}
}

// ignoredIn returns the ignored attribute behind t (its typedefs,
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
