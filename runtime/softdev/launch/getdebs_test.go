package launch

import (
	"strings"
	"testing"
)

// TestMissingDebsSaySo: a packages directory that does not exist and one
// without packages are told apart, and both say how to get them.
func TestMissingDebsSaySo(t *testing.T) {
	for _, c := range []struct{ dir, want string }{
		{t.TempDir() + "/absent", "does not exist"},
		{t.TempDir(), "exists but holds no .deb packages"},
	} {
		_, err := UnpackDebs(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "MLNX_OFED_LINUX-4.9-7.1.0.0") || !strings.Contains(err.Error(), "OFED_DEBS") {
			t.Errorf("UnpackDebs(%s) = %v, want an error saying it %s and how to get the packages", c.dir, err, c.want)
		}
	}
}
