"""Fixed sets of discovered devices: a workstation that has every default class, and helpers.

The values mirror what udev reports on real hosts (sysfs paths, uevent properties, parents);
the golden specs in ``golden/`` are generated from :data:`WORKSTATION`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cdi_plugin.discovery.model import Ancestor, DiscoveredDevice, NodeInfo

KVM_GID = 108
RENDER_GID = 109
VIDEO_GID = 44
DIALOUT_GID = 20


def props(**values: str) -> Mapping[str, str]:
    return MappingProxyType(dict(values))


def char(major: int, minor: int, mode: int = 0o600, gid: int = 0) -> NodeInfo:
    return NodeInfo("c", major, minor, mode, 0, gid)


def misc(
    name: str, minor: int, devnode: str | None = None, mode: int = 0o600, gid: int = 0
) -> DiscoveredDevice:
    node = devnode or f"/dev/{name}"
    return DiscoveredDevice(
        subsystem="misc",
        sys_name=name,
        sys_path=f"/sys/devices/virtual/misc/{name}",
        devnode=node,
        node=char(10, minor, mode, gid),
        properties=props(MAJOR="10", MINOR=str(minor), DEVNAME=node.removeprefix("/dev/")),
    )


def pci(slot: str, driver: str, vendor: str, device: str = "0x0000") -> Ancestor:
    return Ancestor(
        subsystem="pci",
        sys_name=slot,
        sys_path=f"/sys/devices/pci0000:00/0000:00:01.0/{slot}",
        driver=driver,
        properties=props(DRIVER=driver, PCI_SLOT_NAME=slot, PCI_ID=f"{vendor[2:]}:{device[2:]}".upper()),
        attributes=props(vendor=vendor, device=device),
    )


def drm(kernel: str, minor: int, parent: Ancestor, gid: int, id_path: bool = True) -> DiscoveredDevice:
    devnode = f"/dev/dri/{kernel}"
    extra = {"ID_PATH": f"pci-{parent.sys_name}"} if id_path else {}
    return DiscoveredDevice(
        subsystem="drm",
        sys_name=kernel,
        sys_path=f"{parent.sys_path}/drm/{kernel}",
        devnode=devnode,
        devtype="drm_minor",
        node=char(226, minor, 0o660, gid),
        properties=props(
            MAJOR="226", MINOR=str(minor), DEVNAME=f"dri/{kernel}", DEVTYPE="drm_minor", **extra
        ),
        ancestors=(parent,),
    )


XHCI = pci("0000:00:14.0", "xhci_hcd", "0x8086", "0xa36d")


def usb_tty(
    kernel: str,
    minor: int,
    port: str,
    *,
    serial: str | None,
    udev: bool = True,
    driver: str = "ftdi_sio",
    major: int = 188,
) -> DiscoveredDevice:
    """A USB serial port: tty device, usb-serial port, USB interface, USB device, host controller."""
    usb_path = f"{XHCI.sys_path}/usb1/1-{port}"
    usb_device = Ancestor(
        subsystem="usb",
        sys_name=f"1-{port}",
        sys_path=usb_path,
        driver="usb",
        properties=props(DEVTYPE="usb_device", PRODUCT="403/6001/600", BUSNUM="001"),
        attributes=props(serial=serial) if serial is not None else props(),
    )
    interface = Ancestor(
        subsystem="usb",
        sys_name=f"1-{port}:1.0",
        sys_path=f"{usb_path}/1-{port}:1.0",
        driver=driver,
        properties=props(DEVTYPE="usb_interface", INTERFACE="255/255/255"),
    )
    known: dict[str, str] = {}
    if udev:
        known["ID_PATH"] = f"pci-0000:00:14.0-usb-0:{port}:1.0"
        if serial is not None:
            known["ID_SERIAL_SHORT"] = serial
            known["ID_SERIAL"] = f"FTDI_FT232R_USB_UART_{serial}"
    return DiscoveredDevice(
        subsystem="tty",
        sys_name=kernel,
        sys_path=f"{interface.sys_path}/{kernel}/tty/{kernel}",
        devnode=f"/dev/{kernel}",
        node=char(major, minor, 0o660, DIALOUT_GID),
        properties=props(MAJOR=str(major), MINOR=str(minor), DEVNAME=kernel, **known),
        ancestors=(interface, usb_device, XHCI),
    )


def video(kernel: str, minor: int, index: int, serial: str) -> DiscoveredDevice:
    port = "4"
    usb_device = Ancestor(
        subsystem="usb",
        sys_name=f"1-{port}",
        sys_path=f"{XHCI.sys_path}/usb1/1-{port}",
        driver="usb",
        properties=props(DEVTYPE="usb_device"),
        attributes=props(serial=serial),
    )
    return DiscoveredDevice(
        subsystem="video4linux",
        sys_name=kernel,
        sys_path=f"{usb_device.sys_path}/1-{port}:1.0/video4linux/{kernel}",
        devnode=f"/dev/{kernel}",
        node=char(81, minor, 0o660, VIDEO_GID),
        properties=props(
            MAJOR="81",
            MINOR=str(minor),
            DEVNAME=kernel,
            ID_PATH=f"pci-0000:00:14.0-usb-0:{port}:1.0",
            ID_SERIAL_SHORT=serial,
        ),
        attributes=props(index=str(index), name="HD Webcam C270"),
        ancestors=(usb_device, XHCI),
    )


AMD_GPU = pci("0000:03:00.0", "amdgpu", "0x1002", "0x73bf")
INTEL_GPU = pci("0000:00:02.0", "i915", "0x8086", "0x4680")
MLX = pci("0000:41:00.0", "mlx5_core", "0x15b3", "0x101b")

UVERBS0 = DiscoveredDevice(
    subsystem="infiniband_verbs",
    sys_name="uverbs0",
    sys_path=f"{MLX.sys_path}/infiniband_verbs/uverbs0",
    devnode="/dev/infiniband/uverbs0",
    node=char(231, 192, 0o666),
    properties=props(MAJOR="231", MINOR="192", DEVNAME="infiniband/uverbs0", ID_PATH="pci-0000:41:00.0"),
    attributes=props(ibdev="mlx5_0"),
    ancestors=(MLX,),
)

WORKSTATION: tuple[DiscoveredDevice, ...] = (
    misc("fuse", 229, mode=0o666),
    misc("tun", 200, "/dev/net/tun", mode=0o666),
    misc("vhost-net", 238, mode=0o660, gid=KVM_GID),
    misc("kvm", 232, mode=0o660, gid=KVM_GID),
    misc("loop-control", 237, mode=0o660, gid=6),
    misc("rdma_cm", 254, "/dev/infiniband/rdma_cm", mode=0o666),
    misc("binder", 60, "/dev/binderfs/binder", mode=0o666),
    misc("hwbinder", 61, "/dev/binderfs/hwbinder", mode=0o666),
    misc("vndbinder", 62, "/dev/binderfs/vndbinder", mode=0o666),
    misc("vfio", 196, "/dev/vfio/vfio", mode=0o666),
    drm("card0", 0, AMD_GPU, VIDEO_GID),
    drm("renderD128", 128, AMD_GPU, RENDER_GID),
    drm("card1", 1, INTEL_GPU, VIDEO_GID, id_path=False),
    drm("renderD129", 129, INTEL_GPU, RENDER_GID, id_path=False),
    DiscoveredDevice(
        subsystem="drm",
        sys_name="card0-DP-1",
        sys_path=f"{AMD_GPU.sys_path}/drm/card0/card0-DP-1",
        devtype="drm_connector",
        properties=props(DEVTYPE="drm_connector"),
        ancestors=(AMD_GPU,),
    ),
    DiscoveredDevice(
        subsystem="kfd",
        sys_name="kfd",
        sys_path="/sys/devices/virtual/kfd/kfd",
        devnode="/dev/kfd",
        node=char(235, 0, 0o666, RENDER_GID),
        properties=props(MAJOR="235", MINOR="0", DEVNAME="kfd"),
    ),
    usb_tty("ttyUSB0", 0, "1", serial="FT4ZK0A1"),
    usb_tty("ttyUSB1", 1, "2.1", serial="A50285BI"),
    usb_tty("ttyUSB2", 2, "2.2", serial="A50285BI"),
    usb_tty("ttyACM0", 0, "3", serial="0042", driver="cdc_acm", major=166),
    DiscoveredDevice(
        subsystem="tty",
        sys_name="ttyS0",
        sys_path="/sys/devices/pnp0/00:04/tty/ttyS0",
        devnode="/dev/ttyS0",
        node=char(4, 64, 0o660, DIALOUT_GID),
    ),
    video("video0", 0, 0, "200901010001"),
    video("video1", 1, 1, "200901010001"),
    UVERBS0,
    DiscoveredDevice(
        subsystem="hidraw",
        sys_name="hidraw0",
        sys_path=f"{XHCI.sys_path}/usb1/1-5/1-5:1.0/0003:1050:0407.0001/hidraw/hidraw0",
        devnode="/dev/hidraw0",
        node=char(243, 0, 0o600),
        properties=props(MAJOR="243", MINOR="0", DEVNAME="hidraw0", ID_SERIAL_SHORT="0012345678"),
    ),
    DiscoveredDevice(
        subsystem="vfio",
        sys_name="12",
        sys_path="/sys/devices/virtual/vfio/12",
        devnode="/dev/vfio/12",
        node=char(511, 0, 0o600),
    ),
    DiscoveredDevice(
        subsystem="mem",
        sys_name="null",
        sys_path="/sys/devices/virtual/mem/null",
        devnode="/dev/null",
        node=char(1, 3, 0o666),
    ),
)
