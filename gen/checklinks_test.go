package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckLinks: gen check compares the package's header links by their
// targets: one pointing elsewhere, one missing, one that is a regular
// file and one the generator no longer writes each make the package not
// current, named in the report.
func TestCheckLinks(t *testing.T) {
	inc, pkg := checkPkg(t, checkHeader)
	link := filepath.Join(pkg, "zhdr_infiniband_verbs_exp.h")
	want := filepath.Join(inc, "infiniband", "verbs_exp.h")
	if target, err := os.Readlink(link); err != nil || target != want {
		t.Fatalf("%s: link to %q (%v), want %q", link, target, err, want)
	}
	if code, out, errs := cli(t, "check", pkg); code != 0 {
		t.Fatalf("the package as generated: exit %d\n%s%s", code, out, errs)
	}
	for _, c := range []struct {
		what   string
		change func()
		says   string
	}{
		{"a link retargeted", func() { os.Remove(link); os.Symlink("/elsewhere/verbs_exp.h", link) },
			"zhdr_infiniband_verbs_exp.h: a link to /elsewhere/verbs_exp.h, want " + want},
		{"a link removed", func() { os.Remove(link) }, "zhdr_infiniband_verbs_exp.h: missing from"},
		{"a regular file for a link", func() { os.Remove(link); os.WriteFile(link, []byte("struct x;"), 0o644) },
			"zhdr_infiniband_verbs_exp.h: not a symbolic link (want one to " + want + ")"},
		{"a link no longer written", func() { os.Symlink(want, filepath.Join(pkg, "zhdr_infiniband_old.h")) },
			"zhdr_infiniband_old.h: written by gen, but gen no longer writes it"},
	} {
		c.change()
		code, out, errs := cli(t, "check", pkg)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s%s", c.what, code, out, errs)
		}
		wantAll(t, c.what, out, "1/3 current:  FAIL", c.says)
		// As generated again, for the next case.
		os.Remove(link)
		os.Remove(filepath.Join(pkg, "zhdr_infiniband_old.h"))
		os.Symlink(want, link)
	}
}
