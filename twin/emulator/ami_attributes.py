"""AMI sharing and deprecation as EC2 does them, where moto 5.2.5 falls short:

- an AMI registered through the API is `pending` for the first PENDING_DESCRIBES DescribeImages
  answers that list it, then `available` (EC2 registers a snapshot-backed AMI in seconds, but not at
  once), and while it is pending ModifyImageAttribute and EnableImageDeprecation answer
  InvalidAMIID.Unavailable ("... is currently pending and may not be used for this operation");
- ModifyImageAttribute checks organization and OU ARNs (moto takes any string);
- EnableImageDeprecation / DisableImageDeprecation exist (moto has neither): DeprecateAt is rounded
  to the nearest minute, a time in the past or more than 10 years ahead is InvalidParameterValue,
  and DescribeImages shows DeprecationTime.

Only while an emulator is active (state.ACTIVE); installed by amis_twin.install()."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError, InvalidAMIIdError
from moto.ec2.models.amis import Ami, AmiBackend
from moto.ec2.responses.amis import AmisResponse

from . import patching
from . import state as st

PENDING_DESCRIBES = 1
MAX_DEPRECATION = timedelta(days=3652)
ORGANIZATION_ARN = re.compile(
    r"^arn:aws[a-z-]*:organizations::\d{12}:organization/o-[a-z0-9]{10,32}$"
)
OU_ARN = re.compile(
    r"^arn:aws[a-z-]*:organizations::\d{12}:ou/o-[a-z0-9]{10,32}/ou-[0-9a-z]{4,32}-[0-9a-z]{8,32}$"
)

_orig: dict[str, Any] = {}


def mark_pending(image: Ami) -> None:
    """A just-registered AMI: pending until DescribeImages has listed it PENDING_DESCRIBES times."""
    if st.ACTIVE is None:
        return
    image.state = "pending"
    setattr(image, "twin_pending_describes", PENDING_DESCRIBES)  # noqa: B010 (not a moto attribute)


def _describe_images(self: AmiBackend, *args: Any, **kwargs: Any) -> Any:
    images = _orig["describe_images"](self, *args, **kwargs)
    for image in images:
        left = getattr(image, "twin_pending_describes", None)
        if left is None:
            continue
        if left <= 0:
            image.state = "available"
            image.twin_pending_describes = None
        else:
            image.twin_pending_describes = left - 1
    return images


def _ami(response: AmisResponse, image_id: str) -> Ami:
    ami = response.ec2_backend.amis.get(image_id)
    if ami is None:
        raise InvalidAMIIdError(image_id)
    if getattr(ami, "twin_pending_describes", None) is not None and ami.state == "pending":
        raise EC2ClientError(
            "InvalidAMIID.Unavailable",
            f"The AMI ID '{image_id}' is currently pending and may not be used for this operation",
        )
    return ami


def _check_organizations(response: AmisResponse) -> None:
    permissions = response._get_param("LaunchPermission", {})
    entries = [*permissions.get("Add", []), *permissions.get("Remove", [])]
    orgs = [e["OrganizationArn"] for e in entries if "OrganizationArn" in e]
    ous = [e["OrganizationalUnitArn"] for e in entries if "OrganizationalUnitArn" in e]
    orgs += response._get_param("OrganizationArns", [])
    ous += response._get_param("OrganizationalUnitArns", [])
    for arn in orgs:
        if not ORGANIZATION_ARN.match(arn):
            raise EC2ClientError("InvalidParameterValue", f"Invalid organization ARN: {arn}")
    for arn in ous:
        if not OU_ARN.match(arn):
            raise EC2ClientError("InvalidParameterValue", f"Invalid organizational unit ARN: {arn}")


def _modify_image_attribute(self: AmisResponse) -> Any:
    if st.ACTIVE is not None:
        _ami(self, self._get_param("ImageId"))
        _check_organizations(self)
    return _orig["modify_image_attribute"](self)


def parse_deprecate_at(raw: str, now: datetime) -> datetime:
    """DeprecateAt as EC2 takes it: UTC, seconds rounded to the nearest minute, not in the past,
    at most 10 years ahead."""
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise EC2ClientError("InvalidParameterValue", f"Invalid DeprecateAt: {raw}") from None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    at = (at + timedelta(seconds=30)).replace(second=0, microsecond=0)
    if at < now:
        raise EC2ClientError(
            "InvalidParameterValue", f"The deprecation time {raw} can't be in the past."
        )
    if at > now + MAX_DEPRECATION:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"The deprecation time {raw} can't be more than 10 years from now.",
        )
    return at


def _enable_image_deprecation(self: AmisResponse) -> ActionResult:
    ami = _ami(self, self._get_param("ImageId"))
    self.error_on_dryrun()
    at = parse_deprecate_at(str(self._get_param("DeprecateAt")), datetime.now(UTC))
    setattr(ami, "deprecation_time", at.strftime("%Y-%m-%dT%H:%M:%S.000Z"))  # noqa: B010
    return ActionResult({"Return": True})


def _disable_image_deprecation(self: AmisResponse) -> ActionResult:
    ami = _ami(self, self._get_param("ImageId"))
    self.error_on_dryrun()
    setattr(ami, "deprecation_time", None)  # noqa: B010
    return ActionResult({"Return": True})


PATCHES = {
    "describe_images": (AmiBackend, "describe_images", _describe_images),
    "modify_image_attribute": (AmisResponse, "modify_image_attribute", _modify_image_attribute),
    "enable_image_deprecation": (
        AmisResponse,
        "enable_image_deprecation",
        _enable_image_deprecation,
    ),
    "disable_image_deprecation": (
        AmisResponse,
        "disable_image_deprecation",
        _disable_image_deprecation,
    ),
}


def install() -> None:
    if not hasattr(Ami, "deprecation_time"):
        setattr(Ami, "deprecation_time", None)  # noqa: B010 (read by DescribeImages)
    patching.install(_orig, PATCHES)
