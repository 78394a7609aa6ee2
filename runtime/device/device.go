//go:build linux && cgo

// Package device opens a verbs device through libibverbs, as a program
// does on a cluster: the first device ibv_get_device_list returns, or the
// one of a given name, with the generated package's exported verbs (so
// behind its legacy guard). On a host with MLNX_OFED that is an HCA; under
// `softdev exec` (runtime/softdev/launch) it is softdev behind the
// vendor's own libibverbs, the same code path.
package device

import (
	"fmt"
	"strings"
	"github.com/verbsexp/verbsexp/generated/verbs"
)

// Device is an open device.
type Device struct {
	Name    string
	Context *verbs.Context
}

// Open opens the device called name, or the first one listed if name is
// "". The error lists the devices there are when none matches.
func Open(name string) (*Device, error) {
	list, err := verbs.GetDeviceList()
	if err != nil {
		return nil, fmt.Errorf("device: ibv_get_device_list: %w", err)
	}
	defer verbs.FreeDeviceList(list)
	var names []string
	for _, d := range list.All() {
		got, err := verbs.GetDeviceName(d)
		if err != nil {
			return nil, fmt.Errorf("device: ibv_get_device_name: %w", err)
		}
		names = append(names, got)
		if name != "" && got != name {
			continue
		}
		ctx, err := verbs.OpenDevice(d)
		if err != nil {
			return nil, fmt.Errorf("device: ibv_open_device(%s): %w", got, err)
		}
		return &Device{Name: got, Context: ctx}, nil
	}
	if list.Len() == 0 {
		return nil, fmt.Errorf("device: libibverbs lists no device (no HCA, or a program not started under softdev exec)")
	}
	return nil, fmt.Errorf("device: no device %q among %s", name, strings.Join(names, ", "))
}

// Close closes the device.
func (d *Device) Close() error {
	if err := verbs.CloseDevice(d.Context); err != nil {
		return fmt.Errorf("device: ibv_close_device(%s): %w", d.Name, err)
	}
	return nil
}
