"""Find the block device of an attached EBS volume and refuse one that is in use.

Nitro instances expose EBS volumes as NVMe namespaces whose serial is the volume id without the
hyphen (udev links it as /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123...). Xen
instances name the device after the requested /dev/sdX, as /dev/xvdX.
"""

import glob
import os
import re
import stat
from typing import Optional

from .blockdev import in_use
from .errors import Failure

VOLUME_ID = re.compile(r"^vol-[0-9a-f]{8}([0-9a-f]{9})?$")
DEVICE_NAME = re.compile(r"^/dev/(sd|xvd)([a-z]{1,2})$")
BY_ID_PREFIX = "nvme-Amazon_Elastic_Block_Store_"


def _is_block(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _by_id(serial: str) -> Optional[str]:
    directory = os.environ.get("SPARSECOPY_BY_ID_DIR", "/dev/disk/by-id")
    link = os.path.join(directory, BY_ID_PREFIX + serial)
    if os.path.lexists(link):
        target = os.path.realpath(link)
        if not _is_block(target):
            raise Failure(f"{link} points to {target}, which is not a block device")
        return target
    return None


def _by_serial(serial: str) -> Optional[str]:
    for serial_file in glob.glob("/sys/block/nvme*/device/serial"):
        with open(serial_file) as f:
            if f.read().strip() == serial:
                name = serial_file.split("/")[3]
                return f"/dev/{name}"
    return None


def _by_xen_name(device_name: str) -> Optional[str]:
    match = DEVICE_NAME.match(device_name)
    if not match:
        raise Failure(f"device name {device_name!r} is not of the form /dev/sdX")
    for candidate in (f"/dev/xvd{match.group(2)}", f"/dev/sd{match.group(2)}"):
        if _is_block(candidate):
            return candidate
    return None


def find_device(volume_id: str, device_name: Optional[str]) -> str:
    """The block device of ``volume_id``; Failure when absent, mounted or the root disk."""
    if not VOLUME_ID.match(volume_id):
        raise Failure(f"{volume_id!r} is not an EBS volume id (vol-0123456789abcdef0)")
    serial = volume_id.replace("-", "")
    device = _by_id(serial) or _by_serial(serial)
    if device is None and device_name:
        device = _by_xen_name(device_name)
    if device is None:
        where = f" or as {device_name}" if device_name else ""
        raise Failure(
            f"volume {volume_id} is not attached to this instance (no NVMe device with serial "
            f"{serial}{where}): attach it or wait for the attachment to finish"
        )
    problem = in_use(device)
    if problem:
        raise Failure(f"refusing volume {volume_id}: {problem}")
    return device
