"""Tagging a snapshot sends EventBridge's "Tag Change on Resource" event (the twin keeps them in
the state for its EventBridge rules)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from moto.ec2.models.tags import TagBackend

from . import patching
from . import state as st

_orig: dict[str, Any] = {}


def _create_tags(self: TagBackend, resource_ids: list[str], tags: dict[str, str]) -> bool:
    result = _orig["create_tags"](self, resource_ids, tags)
    emu = st.ACTIVE
    if emu is not None:
        for resource_id in resource_ids:
            if resource_id.startswith("snap-"):
                with emu.lock:
                    emu.snapshot_tags_put.setdefault(resource_id, {}).update(tags)
                emu.tag_events.append(
                    tag_change_event(
                        self,  # type: ignore[arg-type]
                        resource_id,
                        changed=list(tags),
                        all_tags=dict(self.tags[resource_id]),
                    )
                )
    return result


def tag_change_event(
    backend: Any, snapshot_id: str, changed: list[str], all_tags: dict[str, str]
) -> dict[str, Any]:
    region, account = backend.region_name, backend.account_id
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": account,
        "time": now,
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:snapshot/{snapshot_id}"],
        "detail": {
            "changed-tag-keys": changed,
            "service": "ec2",
            "resource-type": "snapshot",
            "version": 1,
            "tags": all_tags,
        },
    }


def install() -> None:
    patching.install(_orig, {"create_tags": (TagBackend, "create_tags", _create_tags)})
