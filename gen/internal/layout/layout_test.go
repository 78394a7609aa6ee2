package layout

import (
	"fmt"
	"strings"
	"testing"

	"github.com/verbsexp/verbsexp/gen/internal/model"
	"github.com/verbsexp/verbsexp/gen/internal/parse"
)

func u(size int64, signed bool) *parse.Type {
	return &parse.Type{Kind: parse.Int, Size: size, Align: int(size), Signed: signed}
}

func mem(name string, off int64, t *parse.Type) *parse.Member {
	return &parse.Member{Name: name, Offset: off, Type: t}
}

// plan builds a one-record package for amd64 and plans it.
func plan(t *testing.T, rec *parse.Record) *Plan {
	t.Helper()
	pkg, err := model.Build("p", []*parse.Unit{{GoArch: "amd64", Records: []*parse.Record{rec}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlanner(pkg, 0).Plan(pkg.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// slots renders the Go struct as "name@offset:type" items.
func slots(p *Plan) string {
	var s []string
	for _, sl := range p.Slots {
		s = append(s, fmt.Sprintf("%s@%d:%s", sl.Name, sl.Offset, render(sl.Type)))
	}
	return strings.Join(s, " ")
}

func render(t *GoType) string {
	switch t.Kind {
	case Arr:
		return fmt.Sprintf("[%d]%s", t.Len, render(t.Elem))
	case Ptr:
		return "*" + render(t.Elem)
	case UnsafePointer:
		return "unsafe.Pointer"
	}
	return t.Name
}

func accessors(p *Plan) string {
	var s []string
	for _, a := range p.Accessors {
		s = append(s, fmt.Sprintf("%s@%d/%d", a.Name, a.Offset, a.Kind))
	}
	return strings.Join(s, " ")
}

func TestLayoutPlans(t *testing.T) {
	cases := []struct {
		name      string
		rec       *parse.Record
		slots     string
		accessors string
	}{
		{
			name: "padding between and after members",
			rec: &parse.Record{Kind: parse.Struct, Tag: "a", Size: 24, Align: 8, Members: []*parse.Member{
				mem("c", 0, u(1, false)), mem("x", 8, u(8, false)), mem("y", 16, u(4, true))}},
			slots: "C@0:uint8 _@1:[7]byte X@8:uint64 Y@16:int32 _@20:[4]byte",
		},
		{
			name: "union is aligned storage plus accessors",
			rec: &parse.Record{Kind: parse.Union, Tag: "u", Size: 8, Align: 8, Members: []*parse.Member{
				mem("a", 0, u(4, false)), mem("b", 0, u(8, false)), mem("raw", 0, &parse.Type{Kind: parse.Array, Size: 8, Align: 1, Len: 8, Elem: u(1, false)})}},
			slots:     "_@0:[1]uint64",
			accessors: "A@0/0 B@0/0 Raw@0/1",
		},
		{
			name: "packed member gets byte storage and an unaligned accessor",
			rec: &parse.Record{Kind: parse.Struct, Tag: "p", Size: 9, Align: 1, Members: []*parse.Member{
				mem("op", 0, u(1, false)), mem("addr", 1, u(8, false))}},
			slots:     "Op@0:uint8 _@1:[8]byte",
			accessors: "Addr@1/0",
		},
		{
			name: "alignment above the members' gets a leading zero-size field",
			rec: &parse.Record{Kind: parse.Struct, Tag: "al", Size: 16, Align: 16, Members: []*parse.Member{
				mem("x", 0, u(4, false))}},
			slots: "_@0:[0]uint64 X@0:uint32 _@4:[12]byte",
		},
		{
			name: "bit-fields share the bytes their bits occupy",
			rec: &parse.Record{Kind: parse.Struct, Tag: "b", Size: 4, Align: 4, Members: []*parse.Member{
				mem("k", 0, u(1, false)),
				{Name: "f", Offset: 1, BitField: true, BitOffset: 8, BitSize: 3, Type: u(4, false)},
				{Name: "g", Offset: 1, BitField: true, BitOffset: 11, BitSize: 9, Type: u(4, true)}}},
			slots:     "_@0:[0]uint32 K@0:uint8 _@1:[2]byte _@3:[1]byte",
			accessors: "F@1/2 G@1/2",
		},
		{
			name: "flexible array has no field, only a slice accessor",
			rec: &parse.Record{Kind: parse.Struct, Tag: "f", Size: 8, Align: 8, Members: []*parse.Member{
				mem("n", 0, u(4, false)),
				{Name: "data", Offset: 8, Flexible: true, Type: &parse.Type{Kind: parse.Array, Len: 0, Elem: u(8, false), Align: 8}}}},
			slots:     "_@0:[0]uint64 N@0:uint32 _@4:[4]byte",
			accessors: "Data@8/3",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := plan(t, c.rec)
			if got := slots(p); got != c.slots {
				t.Errorf("slots\n got %s\nwant %s", got, c.slots)
			}
			if got := accessors(p); got != c.accessors {
				t.Errorf("accessors\n got %s\nwant %s", got, c.accessors)
			}
			var end int64
			for _, s := range p.Slots {
				if s.Offset < end {
					t.Errorf("slot %s at %d overlaps the previous one ending at %d", s.Name, s.Offset, end)
				}
				if s.Offset%s.Type.Align != 0 {
					t.Errorf("slot %s at %d is not aligned to %d: Go would move it", s.Name, s.Offset, s.Type.Align)
				}
				end = s.Offset + s.Type.Size
			}
			if end != c.rec.Size {
				t.Errorf("slots cover %d bytes, record has %d", end, c.rec.Size)
			}
		})
	}
}

// TestAnonymousUnionInStruct: members of an anonymous union are accessors
// on the enclosing struct, reachable under their C names.
func TestAnonymousUnionInStruct(t *testing.T) {
	inner := &parse.Record{Kind: parse.Union, Size: 8, Align: 8, Members: []*parse.Member{
		mem("send", 0, &parse.Type{Kind: parse.Pointer, Size: 8, Align: 8, Elem: &parse.Type{Kind: parse.Void}}),
		mem("recv", 0, &parse.Type{Kind: parse.Pointer, Size: 8, Align: 8, Elem: &parse.Type{Kind: parse.Void}})}}
	rec := &parse.Record{Kind: parse.Struct, Tag: "item", Size: 16, Align: 8, Members: []*parse.Member{
		mem("qp", 0, &parse.Type{Kind: parse.Pointer, Size: 8, Align: 8, Elem: &parse.Type{Kind: parse.Void}}),
		{Name: "", Offset: 8, Type: &parse.Type{Kind: parse.Nested, Size: 8, Align: 8, Record: inner}}}}
	p := plan(t, rec)
	if got, want := slots(p), "QP@0:unsafe.Pointer _@8:unsafe.Pointer"; got != want { // pointer-only union: GC-visible
		t.Errorf("slots %s, want %s", got, want)
	}
	var facts []string
	for _, f := range p.Fields {
		facts = append(facts, fmt.Sprintf("%s=%s@%d", f.C, f.Go, f.Offset))
	}
	if got, want := strings.Join(facts, " "), "qp=QP@0 send=Send()@8 recv=Recv()@8"; got != want {
		t.Errorf("manifest fields %s, want %s", got, want)
	}
}
