package model

import (
	"fmt"
	"go/token"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// initialisms are spelled in capitals in Go names (Go's own convention for
// ID, URL, …), extended with the verbs vocabulary.
var initialisms = map[string]bool{
	"AH": true, "API": true, "CPU": true, "CQ": true, "CQE": true, "CQN": true,
	"CSUM": true, "DC": true, "DCT": true, "DM": true, "DV": true, "EQ": true,
	"FD": true, "GID": true, "GRH": true, "GUID": true, "HW": true, "IB": true, "ID": true,
	"IO": true, "IP": true, "IPV4": true, "IPV6": true, "LID": true, "MAC": true,
	"MR": true, "MTU": true, "MW": true, "ODP": true, "PD": true, "PSN": true,
	"QP": true, "QPN": true, "RC": true, "RDMA": true, "RQ": true, "RSS": true,
	"RWQ": true, "RX": true, "SG": true, "SGE": true, "SL": true, "SQ": true,
	"SRQ": true, "SRQN": true, "TCP": true, "TSO": true, "TX": true, "UC": true,
	"UD": true, "UDP": true, "UMR": true, "VLAN": true, "WC": true, "WQ": true,
	"WQE": true, "WQN": true, "WR": true, "XRC": true, "XRCD": true,
}

// stripPrefixes are removed from C names: the Go package already says verbs.
var stripPrefixes = []string{"ibv_", "IBV_"}

// GoName turns a C identifier into an exported Go identifier:
// ibv_exp_send_wr → ExpSendWR, IBV_EXP_TASK_SEND → ExpTaskSend,
// qp_num → QPNum. Adjacent numeric words keep an underscore between them
// so IBV_RATE_2_5_GBPS (Rate2_5Gbps) stays apart from IBV_RATE_25_GBPS.
func GoName(c string) string {
	return exported(camel(words(c)))
}

// words splits a C identifier, less its ibv_ prefix, into its words.
// Words are separated by _ and by anything else Go does not allow in an
// identifier: gcc takes $ in C identifiers.
func words(c string) []string {
	for _, p := range stripPrefixes {
		if strings.HasPrefix(c, p) && len(c) > len(p) {
			c = c[len(p):]
			break
		}
	}
	parts := strings.FieldsFunc(c, func(r rune) bool { return r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	var r []string
	for _, w := range strings.Split(strings.Join(parts, "_"), "_") {
		if w != "" {
			r = append(r, w)
		}
	}
	return r
}

// camel joins words in Go's MixedCaps, initialisms in capitals.
func camel(words []string) string {
	var b strings.Builder
	prevNumeric := false
	for _, w := range words {
		numeric := isDigits(w)
		if numeric && prevNumeric {
			b.WriteByte('_')
		}
		prevNumeric = numeric
		up := strings.ToUpper(w)
		switch {
		case initialisms[up]:
			b.WriteString(up)
		case numeric:
			b.WriteString(w)
		default:
			lower := strings.ToLower(w)
			if w != up && w != lower {
				// camelCase already: keep its inner capitals.
				lower = w
			}
			r := []rune(lower)
			r[0] = unicode.ToUpper(r[0])
			b.WriteString(string(r))
		}
	}
	return b.String()
}

// exported makes camel's result an exported identifier whatever it
// starts with.
func exported(s string) string {
	if s == "" {
		return "X"
	}
	if s[0] >= '0' && s[0] <= '9' {
		return "N" + s
	}
	if r, _ := utf8.DecodeRuneInString(s); !unicode.IsUpper(r) {
		return "X" + s // a letter without a capital form: exported all the same
	}
	return s
}

// InPackage is the Go name of a package-level C identifier c in package
// pkg: GoName(c), less the package's name where c's leading words spell
// it (mlx5dv_dr_matcher_create in package mlx5dv: DrMatcherCreate, not
// Mlx5dvDrMatcherCreate; verbs_get_ctx in package verbs: GetCtx), so
// that no name stutters (Go style: "the package name is part of every
// name it exports"). It keeps GoName(c), and says why, when what would
// remain is no exported Go identifier (it starts with a digit, say) or is
// the package's name alone; whether the shorter name is free is the
// caller's to judge.
func InPackage(pkg, c string) (name, kept string) {
	full := GoName(c)
	ws := words(c)
	spelled, k := "", 0
	for k < len(ws) && len(spelled) < len(pkg) {
		spelled += strings.ToLower(ws[k])
		k++
	}
	if pkg == "" || spelled != strings.ToLower(pkg) {
		return full, ""
	}
	if k == len(ws) {
		return full, "it is the package's name alone"
	}
	rest := camel(ws[k:])
	if !token.IsIdentifier(rest) || !token.IsExported(rest) {
		return full, fmt.Sprintf("without it, %s is no exported Go identifier", rest)
	}
	return rest, ""
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// namespace hands out unique names: the first claimant keeps a name, later
// ones get a suffix saying what they are, then a number.
type namespace struct {
	taken map[string]string // Go name → C name that holds it
}

func newNamespace() *namespace { return &namespace{taken: map[string]string{}} }

// claim returns a unique Go name for c; suffix disambiguates ("Enum",
// "Func", …). collided reports the C name that held the plain name.
func (ns *namespace) claim(c, want, suffix string) (name, collided string) {
	return ns.claimWith(c, want, suffix, "", "")
}

// claimWith is claim for a name that comes with a second one, prefix+name
// (a member X and its setter SetX): both must be free, and both are
// taken, the second for other (what it is: "the setter of x").
func (ns *namespace) claimWith(c, want, suffix, prefix, other string) (name, collided string) {
	free := func(cand string) bool {
		if _, ok := ns.taken[cand]; ok {
			return false
		}
		_, ok := ns.taken[prefix+cand]
		return prefix == "" || !ok
	}
	if !free(want) {
		collided = ns.taken[want]
		if collided == "" {
			collided = ns.taken[prefix+want] + " (as " + prefix + want + ", the name " + want + "'s setter needs)"
		}
	}
	cand := want
	for i := 1; !free(cand); i++ {
		cand = want + suffix
		if i > 1 {
			cand += strconv.Itoa(i)
		}
	}
	ns.taken[cand] = c
	if prefix != "" {
		ns.taken[prefix+cand] = other
	}
	return cand, collided
}

// reserve marks a name as used without a C owner (generated helpers).
func (ns *namespace) reserve(name string) { ns.taken[name] = "(generated)" }
