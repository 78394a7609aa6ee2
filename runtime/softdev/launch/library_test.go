package launch_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/verbsexp/verbsexp/abiutil/dynlib"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// The generated package through the vendor's libibverbs: a process under
// softdev exec lists and opens the device with the exported verbs
// (dlopen of the real libibverbs.so.1, its legacy guard), queries it, and
// reports what it saw; its parent compares that with ibv_devinfo -v.

// childEnv makes this test binary, run under softdev exec, the child.
const childEnv = "VERBSEXP_LAUNCH_TEST_CHILD"

// seen is what the child reports.
type seen struct {
	Devices   []string
	GUID      uint64 // ibv_get_device_guid, as the library returns it
	Device    map[string]uint64
	FwVer     string
	Port      map[string]uint64
	GID0      [16]byte
	Pkey0     uint16
	Provided  int      // dynlib.ProvidedCount: stand-ins registered
	OpsFile   string   // the file the context's alloc_pd is mapped from
	Verbs     []string // the libibverbs files mapped into the process
	CrossChan bool
}

func TestMain2Child(t *testing.T) {
	if os.Getenv(childEnv) != "devinfo" {
		t.Skip("SKIPPED: the child of TestThroughTheLibrary, run only by it under softdev exec")
	}
	var s seen
	if err := s.look(); err != nil {
		fmt.Printf("child error: %v\n", err)
		os.Exit(3)
	}
	b, _ := json.Marshal(s)
	fmt.Printf("child: %s\n", b)
}

func (s *seen) look() error {
	list, err := verbs.GetDeviceList()
	if err != nil {
		return err
	}
	defer verbs.FreeDeviceList(list)
	devs := list.All()
	for _, d := range devs {
		name, err := verbs.GetDeviceName(d)
		if err != nil {
			return err
		}
		s.Devices = append(s.Devices, name)
	}
	if len(devs) != 1 {
		return fmt.Errorf("%d devices: %v", len(devs), s.Devices)
	}
	if s.GUID, err = verbs.GetDeviceGUID(devs[0]); err != nil {
		return err
	}
	ctx, err := verbs.OpenDevice(devs[0])
	if err != nil {
		return err
	}
	defer verbs.CloseDevice(ctx)
	var a verbs.ExpDeviceAttr
	a.CompMask = ^uint32(0) // everything, as ibv_devinfo -v asks
	if err := verbs.ExpQueryDevice(ctx, &a); err != nil {
		return err
	}
	s.FwVer = strings.TrimRight(string(a.FwVer[:]), "\x00")
	s.CrossChan = a.ExpDeviceCapFlags&uint64(verbs.ExpDeviceCrossChannel) != 0
	s.Device = map[string]uint64{
		"node_guid": a.NodeGUID, "sys_image_guid": a.SysImageGUID, "vendor_id": uint64(a.VendorID),
		"vendor_part_id": uint64(a.VendorPartID), "hw_ver": uint64(a.HWVer), "phys_port_cnt": uint64(a.PhysPortCnt),
		"max_mr_size": a.MaxMRSize, "page_size_cap": a.PageSizeCap, "max_qp": uint64(a.MaxQP),
		"max_qp_wr": uint64(a.MaxQPWR), "max_sge": uint64(a.MaxSGE), "max_sge_rd": uint64(a.MaxSGERd),
		"max_cq": uint64(a.MaxCQ), "max_cqe": uint64(a.MaxCQE), "max_mr": uint64(a.MaxMR), "max_pd": uint64(a.MaxPD),
		"max_qp_rd_atom": uint64(a.MaxQPRdAtom), "max_ee_rd_atom": uint64(a.MaxEeRdAtom),
		"max_res_rd_atom": uint64(a.MaxResRdAtom), "max_qp_init_rd_atom": uint64(a.MaxQPInitRdAtom),
		"max_ee_init_rd_atom": uint64(a.MaxEeInitRdAtom), "atomic_cap": uint64(a.ExpAtomicCap),
		"max_ee": uint64(a.MaxEe), "max_rdd": uint64(a.MaxRdd), "max_mw": uint64(a.MaxMW),
		"max_raw_ipv6_qp": uint64(a.MaxRawIPV6QP), "max_raw_ethy_qp": uint64(a.MaxRawEthyQP),
		"max_mcast_grp": uint64(a.MaxMcastGrp), "max_mcast_qp_attach": uint64(a.MaxMcastQPAttach),
		"max_total_mcast_qp_attach": uint64(a.MaxTotalMcastQPAttach), "max_ah": uint64(a.MaxAH),
		"max_fmr": uint64(a.MaxFmr), "max_srq": uint64(a.MaxSRQ), "max_pkeys": uint64(a.MaxPkeys),
		"local_ca_ack_delay": uint64(a.LocalCaAckDelay), "device_cap_exp_flags": a.ExpDeviceCapFlags,
		"max_srq_wr": uint64(a.MaxSRQWR), "max_srq_sge": uint64(a.MaxSRQSGE), "hca_core_clock": a.HcaCoreClock,
		"max_dct": uint64(a.MaxDCT), "max_device_ctx": uint64(a.MaxDeviceCtx),
		"max_klm_list_size": uint64(a.UMRCaps.MaxKlmListSize), "max_send_wqe_inline_klms": uint64(a.UMRCaps.MaxSendWQEInlineKlms),
		"max_umr_recursion_depth": uint64(a.UMRCaps.MaxUMRRecursionDepth), "max_umr_stride_dimension": uint64(a.UMRCaps.MaxUMRStrideDimension),
		"max_size": a.ODPMRMaxSize, "rx_pad_end_addr_align": uint64(a.RXPadEndAddrAlign), "max_tso": uint64(a.TSOCaps.MaxTSO),
		"qp_rate_limit_min": uint64(a.PacketPacingCaps.QPRateLimitMin), "qp_rate_limit_max": uint64(a.PacketPacingCaps.QPRateLimitMax),
		"ooo_rc_caps": uint64(a.OooCaps.RCCaps), "ooo_xrc_caps": uint64(a.OooCaps.XRCCaps),
		"ooo_dc_caps": uint64(a.OooCaps.DCCaps), "ooo_ud_caps": uint64(a.OooCaps.UDCaps),
		"log atomic arg sizes (mask)": a.ExtAtom.LogAtomicArgSizes, "max fetch and add bit boundary": uint64(a.ExtAtom.MaxFaBitBoundary),
		"log max atomic inline":                                 uint64(a.ExtAtom.LogMaxAtomicInline),
		"masked_log_atomic_arg_sizes (mask)":                    a.MaskedAtomic.MaskedLogAtomicArgSizes,
		"masked_log_atomic_arg_sizes_network_endianness (mask)": a.MaskedAtomic.MaskedLogAtomicArgSizesNetworkEndianness,
	}
	var p verbs.PortAttr
	if err := verbs.QueryPort(ctx, 1, &p); err != nil {
		return err
	}
	s.Port = map[string]uint64{
		"state": uint64(p.State), "max_mtu": uint64(p.MaxMTU), "active_mtu": uint64(p.ActiveMTU),
		"sm_lid": uint64(p.SmLID), "port_lid": uint64(p.LID), "port_lmc": uint64(p.Lmc),
		"max_msg_sz": uint64(p.MaxMsgSz), "port_cap_flags": uint64(p.PortCapFlags), "max_vl_num": uint64(p.MaxVlNum),
		"bad_pkey_cntr": uint64(p.BadPkeyCntr), "qkey_viol_cntr": uint64(p.QkeyViolCntr), "sm_sl": uint64(p.SmSL),
		"pkey_tbl_len": uint64(p.PkeyTblLen), "gid_tbl_len": uint64(p.GIDTblLen), "subnet_timeout": uint64(p.SubnetTimeout),
		"init_type_reply": uint64(p.InitTypeReply), "active_width": uint64(p.ActiveWidth),
		"active_speed": uint64(p.ActiveSpeed), "phys_state": uint64(p.PhysState), "link_layer": uint64(p.LinkLayer),
	}
	var gid verbs.GID
	if err := verbs.QueryGID(ctx, 1, 0, &gid); err != nil {
		return err
	}
	s.GID0 = *gid.Raw()
	var pkey uint16 // (not &s.Pkey0: cgo refuses a pointer into a record that holds Go pointers)
	if err := verbs.QueryPkey(ctx, 1, 0, &pkey); err != nil {
		return err
	}
	s.Pkey0 = pkey
	s.Provided = dynlib.ProvidedCount()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	pc := uint64(uintptr(unsafe.Pointer(ctx.Ops.AllocPD)))
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		if pc >= a && pc < b {
			s.OpsFile = f[5]
		}
		if strings.Contains(filepath.Base(f[5]), "libibverbs") && !slices.Contains(s.Verbs, f[5]) {
			s.Verbs = append(s.Verbs, f[5])
		}
	}
	return nil
}

// TestThroughTheLibrary: the generated package's exported verbs reach
// softdev through the vendor's libibverbs.so.1: the device is listed and
// opened, its ops are the driver's, no stand-in of softdev's in-process
// front end serves any call (none is registered: the child opens no
// in-process device, and softdev registers its stand-ins at its first
// Open, though this binary links it for the speed benchmarks), and every
// field ibv_devinfo -v prints for the same device agrees with what
// ExpQueryDevice, QueryPort and QueryGID say.
func TestThroughTheLibrary(t *testing.T) {
	needVendor(t)
	addr := "127.0.0.9"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := launched(nil, addr, self, "-test.run=^TestMain2Child$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=devinfo")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "already served") {
		t.Skipf("SKIPPED: %s is in use by another softdev on this host", addr)
	}
	m := regexp.MustCompile(`(?m)^child: (.*)$`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("the child under softdev exec: %v\n%s", err, out)
	}
	var s seen
	if err := json.Unmarshal(m[1], &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 1 || s.Devices[0] != "softdev0" {
		t.Errorf("GetDeviceList: %v, want [softdev0]", s.Devices)
	}
	if s.Provided != 0 {
		t.Errorf("%d functions provided by a stand-in: the calls did not all go to the library", s.Provided)
	}
	if filepath.Base(s.OpsFile) != filepath.Base(vendor.Driver) {
		t.Errorf("the context's alloc_pd is in %q, not the driver %s", s.OpsFile, vendor.Driver)
	}
	if len(s.Verbs) != 1 || !strings.HasPrefix(s.Verbs[0], vendor.Root) {
		t.Errorf("the process mapped %q, want the vendor's libibverbs under %s alone", s.Verbs, vendor.Root)
	}
	if !s.CrossChan {
		t.Errorf("ExpQueryDevice does not report IBV_EXP_DEVICE_CROSS_CHANNEL")
	}

	dev, err := launched(nil, addr, bin("ibv_devinfo"), "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, dev)
	}
	info := devinfoFields(string(dev))
	compared := 0
	for k, got := range info {
		want, dev := s.Device[k]
		if p, port := s.Port[k]; port {
			want = p
		} else if !dev {
			if why, ok := notQueried[k]; !ok {
				t.Errorf("ibv_devinfo -v prints %s (%q), which this test neither compares nor accounts for", k, got)
			} else if why == "" {
				t.Errorf("%s: accounted for without a reason", k)
			}
			continue
		}
		compared++
		if v, err := devinfoNumber(k, got); err != nil || v != want {
			t.Errorf("%s: ibv_devinfo says %q, the generated package %d (%#x) (%v)", k, got, want, want, err)
		}
	}
	if info["fw_ver"] != s.FwVer {
		t.Errorf("fw_ver: ibv_devinfo %q, ExpQueryDevice %q", info["fw_ver"], s.FwVer)
	}
	if want := gidText(s.GID0); info["GID[  0]"] != want {
		t.Errorf("GID[0]: ibv_devinfo %q, QueryGID %q", info["GID[  0]"], want)
	}
	if compared < 60 {
		t.Errorf("only %d fields compared; ibv_devinfo -v printed:\n%s", compared, dev)
	}
	t.Logf("%d fields of ibv_devinfo -v agree with the generated package's queries", compared+2)
}

// notQueried are the fields ibv_devinfo -v prints that no query of the
// generated package returns, with where they come from (each is checked
// elsewhere in this file or the tree's test, or is a heading).
var notQueried = map[string]string{
	"hca_id":               "the device's name (ibv_get_device_name: GetDeviceList above)",
	"transport":            "the sysfs tree's node_type, read by the library (TestDevinfo)",
	"board_id":             "the sysfs tree (TestDevinfo)",
	"fw_ver":               "a string: compared below",
	"GID[  0]":             "ibv_query_gid: compared below",
	"device_cap_flags":     "the legacy device_cap_flags ibv_devinfo reads with ibv_query_device, not ibv_exp_query_device (0 on both)",
	"Device ports":         "a heading",
	"port":                 "a heading: the port's number",
	"general_odp_caps":     "a heading (its caps are the NO SUPPORT lines)",
	"rc_odp_caps":          "a heading",
	"uc_odp_caps":          "a heading",
	"ud_odp_caps":          "a heading",
	"dc_odp_caps":          "a heading",
	"xrc_odp_caps":         "a heading",
	"raw_eth_odp_caps":     "a heading",
	"tso_caps":             "a heading (max_tso follows)",
	"packet_pacing_caps":   "a heading",
	"ooo_caps":             "a heading",
	"sw_parsing_caps":      "a heading",
	"supported_qp":         "a heading",
	"tunnel_offloads_caps": "a heading",
	"active_speed":         "printed as a speed's name; IBV_SPEED values are not an enum the query's field compares with by text",
}

// devinfoFields maps each "key: value" (or "key = value") line of
// ibv_devinfo -v, and the lines whose value follows the key after tabs
// only (the atomic sizes).
func devinfoFields(out string) map[string]string {
	f := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			k, v, ok = strings.Cut(l, " = ")
		}
		if !ok {
			k, v, ok = strings.Cut(l, "\t")
		}
		if !ok {
			continue // a sentence: "Multi-Packet RQ is not supported", "NO SUPPORT"
		}
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if _, dup := f[k]; !dup {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// devinfoNumber reads a value as ibv_devinfo prints it: decimal, 0x hex,
// a GUID as four hex groups (in network order, as the attribute holds
// it), a name with its number in parentheses, a link layer by name.
func devinfoNumber(key, v string) (uint64, error) {
	if m := regexp.MustCompile(`\((\d+)\)`).FindStringSubmatch(v); m != nil {
		return strconv.ParseUint(m[1], 10, 64)
	}
	switch {
	case strings.Contains(key, "guid"):
		h, err := strconv.ParseUint(strings.ReplaceAll(v, ":", ""), 16, 64)
		if err != nil {
			return 0, err
		}
		var be [8]byte
		for i := range be {
			be[i] = byte(h >> (56 - 8*i))
		}
		return *(*uint64)(unsafe.Pointer(&be)), nil
	case key == "link_layer":
		return map[string]uint64{"InfiniBand": 1, "Ethernet": 2}[v], nil
	case key == "active_width":
		return map[string]uint64{"1X": 1, "4X": 2, "8X": 4, "12X": 8}[strings.Fields(v)[0]], nil
	}
	f := strings.Fields(strings.TrimSuffix(v, "kbps"))
	if len(f) == 0 {
		return 0, errors.New("empty")
	}
	return strconv.ParseUint(f[0], 0, 64)
}

// gidText is a GID as ibv_devinfo prints it.
func gidText(g [16]byte) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", g[i], g[i+1]))
	}
	return strings.Join(parts, ":")
}
