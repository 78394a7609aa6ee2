package launch

import (
	"fmt"
	"net/netip"
	"path"
)

// The names the tree gives the device: its uverbs file and its IB device.
const (
	uverbsName = "uverbs0"
	ibdevName  = "softdev0"
)

// uverbsABI is the uverbs ABI version the tree reports (the kernel's
// since Linux 2.6.18); the legacy library takes 3 to 6.
const uverbsABI = "6"

// lidOf is the port's LID on an InfiniBand port: the address's low 16
// bits, as the engine computes it (sd_lid_of), or 0 when they are not a
// unicast LID.
func lidOf(a netip.Addr) uint16 {
	b := a.As16()
	lid := uint16(b[14])<<8 | uint16(b[15])
	if lid == 0 || lid >= 0xc000 {
		return 0
	}
	return lid
}

// nodeGUID is derived from the address, so that the tree and the engine
// (which reads it from the tree) agree and two devices never share one:
// 02f7:de01 then the IPv4 address, or 02f7:de02 then the low 32 bits of
// an IPv6 one (locally administered, as softdev's in-process GUIDs).
func nodeGUID(a netip.Addr) string {
	b := a.As16()
	kind := 1
	if !a.Is4() && !a.Is4In6() {
		kind = 2
	}
	return fmt.Sprintf("02f7:de%02x:%02x%02x:%02x%02x", kind, b[12], b[13], b[14], b[15])
}

// gidString is a GID as sysfs writes it: the address, IPv4-mapped, as
// eight groups of four hex digits.
func gidString(a netip.Addr) string {
	b := a.As16()
	s := ""
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02x%02x", b[i], b[i+1])
	}
	return s
}

// sysfsTree is the tree the legacy library reads under $SYSFS_PATH
// (src/init.c, src/sysfs.c, src/verbs.c: ibv_query_gid and
// ibv_query_pkey read ports/N/gids/M and pkeys/M): one uverbs device
// whose IB device is a softdev at addr. Paths are relative to the root;
// every file ends with a newline, as the kernel writes them.
func sysfsTree(addr netip.Addr, ethernet bool) map[string]string {
	ib := path.Join("class/infiniband", ibdevName)
	port := path.Join(ib, "ports/1")
	linkLayer, gidType := "InfiniBand", "IB/RoCE v1"
	if ethernet {
		linkLayer, gidType = "Ethernet", "RoCE v2"
	}
	lid := lidOf(addr)
	if ethernet {
		lid = 0
	}
	files := map[string]string{
		"class/infiniband_verbs/abi_version":                           uverbsABI,
		path.Join("class/infiniband_verbs", uverbsName, "ibdev"):       ibdevName,
		path.Join("class/infiniband_verbs", uverbsName, "abi_version"): uverbsABI,
		path.Join(ib, "node_type"):                                     "1: CA",
		path.Join(ib, "node_guid"):                                     nodeGUID(addr),
		path.Join(ib, "sys_image_guid"):                                nodeGUID(addr),
		path.Join(ib, "hca_type"):                                      "softdev",
		path.Join(ib, "fw_ver"):                                        "softdev-2",
		path.Join(ib, "hw_rev"):                                        "0",
		path.Join(ib, "board_id"):                                      "SOFTDEV",
		path.Join(ib, "node_desc"):                                     "softdev " + addr.String(),
		path.Join(port, "link_layer"):                                  linkLayer,
		path.Join(port, "lid"):                                         fmt.Sprintf("0x%x", lid),
		path.Join(port, "lid_mask_count"):                              "0",
		path.Join(port, "sm_lid"):                                      map[bool]string{true: "0x0", false: "0x1"}[ethernet],
		path.Join(port, "sm_sl"):                                       "0",
		path.Join(port, "state"):                                       "4: ACTIVE",
		path.Join(port, "phys_state"):                                  "5: LinkUp",
		path.Join(port, "cap_mask"):                                    "0x00000000",
		path.Join(port, "gids/0"):                                      gidString(addr),
		path.Join(port, "pkeys/0"):                                     "0xffff",
		path.Join(port, "gid_attrs/types/0"):                           gidType,
	}
	for k, v := range files {
		files[k] = v + "\n"
	}
	return files
}
