package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// layoutWorks are record layouts the generator must get right on every
// target: each is generated for amd64, arm64 and ppc64le and checked
// against each target's gcc by gen check (sizes, alignments, offsets and
// bit-field positions). They are the attribute and bit-field constructs
// a comparison with gcc showed the C front end to lay out as gcc does.
var layoutWorks = []string{
	"struct ibv_w1 { char c; int a __attribute__((aligned(16))); };",
	"struct ibv_w2 { char c; _Alignas(16) int a; };",
	"typedef int ibv_a8 __attribute__((aligned(8)));\nstruct ibv_w3 { char c; ibv_a8 a:3; };",
	"struct ibv_w4 { char c; int a __attribute__((packed)); short s; };",
	"struct ibv_w5 { char c; int a:30; char d; } __attribute__((packed));",
	"#pragma pack(push, 2)\nstruct ibv_w6 { char c; int a:20; int b:20; long long l:40; };\n#pragma pack(pop)",
	"struct ibv_w7 { char c; int :0; char d; int e:3; long :0; char f; };",
	"enum ibv_we { IBV_WE_A = 1, IBV_WE_B = 3 };\nstruct ibv_w8 { enum ibv_we e:2; _Bool b:1; char ch:3; signed char sc:3; unsigned char uc:3; };",
	"struct ibv_w9 { char c; long long a:40; long long b:30; };",
	"struct ibv_w10 { char c; long double x; _Complex double z; _Atomic int at; };",
	"struct ibv_w11 { char c; unsigned long long x __attribute__((warn_if_not_aligned(8))); };",
	"struct ibv_w12 { char c; int x; } __attribute__((packed, aligned(4)));",
	"struct ibv_w13 { char c; int :3; char d; short :5; int e; };",
	"union ibv_w14 { int a:3; long long b:40; char c; };",
	"struct ibv_w15 { char c; } __attribute__((aligned(64)));\nstruct ibv_w16 { char c; struct ibv_w15 b; };",
	"#pragma pack(1)\nstruct ibv_w17 { char c; int x; };\n#pragma pack()\nstruct ibv_w18 { char c; struct ibv_w17 i; long long y; };",
	"struct ibv_w19 { unsigned int a:30; unsigned int b:30; unsigned char c:7; unsigned short d:10; };",
	"struct ibv_w20 { unsigned char a:7; unsigned int b:30; } __attribute__((packed));",
	"struct ibv_w21 { char c; struct { char d; } __attribute__((aligned(16))) s; };",
	"struct ibv_w22 { unsigned int v; unsigned a:3; } __attribute__((scalar_storage_order(\"little-endian\")));",
	"struct ibv_w23 { char c; int a:30 __attribute__((packed)); char d; };",
	"struct ibv_w24 { char c; long a:33; unsigned long b:31; char e:3; char f:6; };",
	"struct ibv_w25 { char c; union { struct { char d; long long e; }; int f; }; short g; };",
	"#pragma ms_struct on\nstruct ibv_w26 { char a:4; int b:4; char c:4; };\n#pragma ms_struct off",
}

// layoutRefused are the constructs gcc lays out otherwise than the C
// front end does (each was exit 0 with a layout gen check rejects): the
// generator refuses them at their position, with what gcc does.
var layoutRefused = []struct{ header, want string }{
	{`struct ibv_s { unsigned int v; unsigned int a:4, b:8; } __attribute__((scalar_storage_order("big-endian")));`,
		`verbs_exp.h:1:1: struct ibv_s uses GCC's __attribute__((scalar_storage_order("big-endian"))) (gcc stores its scalars byte-swapped`},
	{"typedef struct { unsigned int v; unsigned a:3; } __attribute__((scalar_storage_order(\"big-endian\"))) ibv_st;\nstruct ibv_s { ibv_st s; };",
		`struct ibv_s: an unnamed record in it uses GCC's __attribute__((scalar_storage_order("big-endian")))`},
	{"#pragma scalar_storage_order big-endian\nstruct ibv_s { unsigned int v; };\n#pragma scalar_storage_order default",
		"verbs_exp.h:1:9: #pragma scalar_storage_order big-endian: gcc stores the scalars of every record after it byte-swapped"},
	{"#define IBV_BE _Pragma(\"scalar_storage_order big-endian\")\nIBV_BE\nstruct ibv_s { unsigned int v; };",
		"verbs_exp.h:1: _Pragma in a macro: #pragma scalar_storage_order big-endian"},
	{"struct ibv_m { char a:4; int b:4; char c:4; } __attribute__((ms_struct));",
		"verbs_exp.h:1:1: struct ibv_m uses GCC's __attribute__((ms_struct)) (gcc lays its bit-fields out by Microsoft's rules)"},
	{"typedef struct __attribute__((ms_struct)) { char a:4; int b:4; } ibv_mt;\nstruct ibv_m { ibv_mt m; };",
		"struct ibv_m: an unnamed record in it uses GCC's __attribute__((ms_struct))"},
	{"struct ibv_al { int a:3 __attribute__((aligned(8))); };",
		"verbs_exp.h:1:21: struct ibv_al: member a uses GCC's __attribute__((aligned(8))) on a bit-field (gcc aligns the bit-field's storage unit by it)"},
	{"struct ibv_al { char c; __attribute__((__aligned__(4))) int a:3; int b:5; };",
		"struct ibv_al: member a uses GCC's __attribute__((__aligned__(4))) on a bit-field"},
	{"struct ibv_al { char c; int a:3 __attribute__((packed, aligned(2))); };",
		"struct ibv_al: member a uses GCC's __attribute__((aligned(2))) on a bit-field"},
	{"struct ibv_x { char c; int :0 __attribute__((aligned(16))); char d; };",
		"verbs_exp.h:1:24: struct ibv_x: an unnamed bit-field uses GCC's __attribute__((aligned(16))) on a bit-field"},
	{"struct ibv_al { char c; int a __attribute__((aligned)); };",
		"verbs_exp.h:1:29: struct ibv_al: member a uses GCC's __attribute__((aligned)) without an alignment (gcc aligns to the target's largest, 16 bytes: write aligned(16) instead)"},
	{"struct ibv_al { char c; } __attribute__((aligned));",
		"verbs_exp.h:1:1: struct ibv_al uses GCC's __attribute__((aligned)) without an alignment"},
	{"typedef int ibv_ai __attribute__((__aligned__));\nstruct ibv_al { char c; ibv_ai a; };",
		"verbs_exp.h:2:32: struct ibv_al: member a (ibv_ai) uses GCC's __attribute__((__aligned__)) without an alignment"},
	{"struct ibv_f { char c; _Float16 h; };",
		"verbs_exp.h:1:33: struct ibv_f: member h has type _Float16, which the C front end the generator uses cannot lay out"},
	{"struct ibv_i { char c; unsigned __int128 y:70; };",
		"the C compiler accepts the headers, but the C front end the generator reads them with (modernc.org/cc/v4) does not:"},
}

// TestLayoutAttributes: every construct of layoutWorks is laid out as
// gcc lays it out on every target, and every one of layoutRefused is
// refused at its position; none is generated wrong (exit 0 with a layout
// gen check rejects, as scalar_storage_order, ms_struct and aligned on a
// bit-field or without an alignment were).
func TestLayoutAttributes(t *testing.T) {
	header := "#include <stdint.h>\n" + strings.Join(layoutWorks, "\n") + "\n"
	inc := writeHeader(t, header)
	pkg := filepath.Join(t.TempDir(), "verbs")
	if code, _, errs := cli(t, "-q", "-I", inc, "-o", pkg); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errs)
	}
	if code, out, errs := cli(t, "check", pkg); code != 0 {
		t.Errorf("gen check: exit %d (the layouts differ from gcc's)\n%s%s", code, out, errs)
	}
	for _, c := range layoutRefused {
		out := filepath.Join(t.TempDir(), "verbs")
		code, _, errs := cli(t, "-q", "-I", writeHeader(t, c.header+"\n"), "-o", out)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s\nexit %d, want 1 and %q:\n%s", c.header, code, c.want, errs)
		}
	}
}
