"""moto's stock AMIs, without the Region's "latest" ones.

Each EC2 backend moto builds (again after every reset) loads its 44 stock AMIs and, unless
MOTO_AMIS_PATH is set, about 1,250 "latest" AMIs of its Region, each with a snapshot. Every
DescribeSnapshots and DescribeImages then filters all of them, reading each one's tags through a
scan of every tag: a third of the emulator's CPU in a twin execution went there. The twin uses
only the stock ones (tests launch ami-12c6146b; twin/deploy.py takes a stock Amazon Linux AMI for
an image parameter it does not serve), so MOTO_AMIS_PATH points at those, read from moto's own
resource file."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path


def stock_amis_only() -> None:
    """Set MOTO_AMIS_PATH (unless set) before moto builds an EC2 backend."""
    if "MOTO_AMIS_PATH" in os.environ:
        return
    spec = importlib.util.find_spec("moto")
    assert spec is not None and spec.origin is not None, "moto is not installed"
    data = gzip.decompress((Path(spec.origin).parent / "ec2/resources/amis.json.gz").read_bytes())
    name = f"twin-moto-amis-{hashlib.sha256(data).hexdigest()[:16]}.json"
    path = Path(tempfile.gettempdir()) / name
    if not path.exists():
        # another process may write the same file at the same time: each renames its own
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=name, delete=False) as out:
            out.write(data)
        os.replace(out.name, path)
    os.environ["MOTO_AMIS_PATH"] = str(path)
