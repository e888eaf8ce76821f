"""Typed shapes of the JSON that the handlers take and return (docs/contract.md). Keys are
camelCase because they travel through the state machine as they are."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Method = Literal["allocated", "trim"]
SourceKind = Literal["snapshot", "image"]
Market = Literal["spot", "on-demand"]
# teardown's outcome: what to delete (cleanup = failure, run by the cleanup state machine)
Outcome = Literal["success", "failure", "retry", "cleanup"]
# the report's outcome
ReportOutcome = Literal["success", "succeeded-with-warnings", "failure"]


class SourceRef(TypedDict):
    kind: SourceKind
    snapshotId: NotRequired[str]
    imageId: NotRequired[str]


class VolumePlan(TypedDict):
    index: int
    sourceSnapshotId: str
    deviceName: str | None  # the device in the source AMI's mapping; None for a snapshot job
    sizeGiB: int
    encrypted: bool  # of the target volume and the new snapshot
    kmsKeyId: str | None  # ARN of the target's key, None when unencrypted (= targetKmsKeyId)
    # key of the target volume and the new snapshot; None with encrypted true = this account's
    # EBS default key (a source encrypted with another account's key is re-encrypted)
    targetKmsKeyId: str | None
    sourceKmsKeyId: str | None  # ARN of the source snapshot's key, None when unencrypted
    sourceFullSizeBytes: int | None  # None while the snapshot is pending (or EC2 gives none)


class EbsMapping(TypedDict, total=False):
    snapshotId: str
    volumeSize: int
    volumeType: str
    iops: int
    throughput: int
    deleteOnTermination: bool
    encrypted: bool
    kmsKeyId: str


class DeviceMapping(TypedDict):
    deviceName: str
    virtualName: NotRequired[str]
    noDevice: NotRequired[str]
    ebs: NotRequired[EbsMapping]


class ImageSpec(TypedDict):
    """Every RegisterImage attribute of the source AMI, plus what RegisterImage cannot set
    (platformDetails, usageOperation, productCodes, deprecationTime) so register_image can warn."""

    imageId: str
    name: str
    description: str | None
    architecture: str
    rootDeviceName: str
    virtualizationType: str | None
    bootMode: str | None
    enaSupport: bool | None
    sriovNetSupport: str | None
    tpmSupport: str | None
    uefiData: str | None
    imdsSupport: str | None
    kernelId: str | None
    ramdiskId: str | None
    blockDeviceMappings: list[DeviceMapping]
    tags: dict[str, str]
    platformDetails: str | None
    usageOperation: str | None
    productCodes: list[str]
    deprecationTime: str | None


class CompactionPoll(TypedDict):
    intervalSeconds: int
    maxAttempts: int


class Plan(TypedDict):
    executionName: str
    source: SourceRef
    volumes: list[VolumePlan]
    image: ImageSpec | None
    method: Method
    jobs: int
    verify: bool
    fastSnapshotRestoreAzs: list[str]
    kmsKeyId: str | None
    imageName: str | None
    tags: dict[str, str]
    # false while a source snapshot is pending: the workflow calls prepare again (bounded)
    sourcesReady: bool
    pendingSnapshotIds: list[str]
    instanceTypes: list[str]  # transfer instance types in order of preference (sizing.py)
    compactionPoll: CompactionPoll  # bound of the Check compaction loop (sizing.py)
    bytesToCopy: int
    notes: list[str]  # for the report, e.g. re-encryption with another key


class FailedPool(TypedDict):
    instanceType: str
    subnetId: str
    market: Market
    error: str


class InstanceResult(TypedDict):
    instanceId: str
    availabilityZone: str
    subnetId: str
    instanceType: str
    market: Market
    failedPools: list[FailedPool]


class BlockListVolume(TypedDict):
    """One source snapshot's listing progress (compactor/source_blocks.py)."""

    index: int
    snapshotId: str
    done: bool
    heldBlocks: int | None  # blocks listed so far; None when the snapshot could not be listed
    volumeSizeGiB: int | None
    nextToken: str | None
    nextBlockIndex: int
    parts: int  # part objects written
    blockListError: str | None  # why EBS would not list it (the copy then reads without a list)


class SourceBlocksResult(TypedDict):
    complete: bool
    bundleKey: str | None  # the gzip tar the instance fetches, once complete
    volumes: list[BlockListVolume]
    pages: int  # ListSnapshotBlocks pages read so far


class AttachedVolume(TypedDict):
    index: int
    sourceVolumeId: str
    targetVolumeId: str
    sourceDeviceName: str
    targetDeviceName: str


class ReadyResult(TypedDict):
    ready: bool
    state: str
    pingStatus: str | None
    transientError: NotRequired[str]


class AttachResult(TypedDict):
    done: bool
    volumes: list[AttachedVolume]
    waitingFor: list[str]
    transientError: NotRequired[str]


class CommandResult(TypedDict):
    commandId: str


class CompactionResult(TypedDict):
    done: bool
    status: str
    summary: dict[str, Any] | None
    transientError: NotRequired[str]


class SnapshotItem(TypedDict):
    index: int
    snapshotId: str
    sourceSnapshotId: str
    deviceName: str | None
    state: NotRequired[str]
    progress: NotRequired[str]


class SnapshotsResult(TypedDict):
    snapshots: list[SnapshotItem]
    completed: NotRequired[bool]
    # a throttling/5xx answer this call got (not done yet; the poll loop asks again)
    transientError: NotRequired[str]


class ImageResult(TypedDict):
    imageId: str | None
    warnings: list[str]


class FastSnapshotRestoreState(TypedDict):
    snapshotId: str
    availabilityZone: str
    state: str


class FastSnapshotRestoreResult(TypedDict):
    states: list[FastSnapshotRestoreState]


class TeardownResult(TypedDict):
    remaining: int
    terminatedInstances: list[str]
    deletedVolumes: list[str]
    deletedSnapshots: list[str]
    deregisteredImages: list[str]
    deletedObjects: list[str]  # keys of the execution's block lists in the stack's bucket
    # delivered snapshots and their AMIs that teardown left in place on purpose
    keptSnapshots: list[str]
    keptImages: list[str]
    transientErrors: list[str]


class VolumeReport(TypedDict):
    index: int
    sourceSnapshotId: str
    newSnapshotId: str | None
    sourceFullSizeBytes: int | None
    newFullSizeBytes: int | None
    sourceBytesRead: int | None
    targetBytesWritten: int | None
    writtenBlocks: int | None
    # 512 KiB blocks the source snapshot holds (ListSnapshotBlocks) and how many the copy read;
    # None when the snapshot could not be listed (blockListError says why)
    heldBlocks: int | None
    heldBlocksRead: int | None
    blockListError: str | None


class ErrorInfo(TypedDict):
    Error: str
    Cause: str


class Report(TypedDict):
    outcome: ReportOutcome
    executionName: str | None
    source: SourceRef | None
    volumes: list[VolumeReport]
    imageId: str | None
    fastSnapshotRestore: list[FastSnapshotRestoreState]
    phaseSeconds: dict[str, float]
    totalSeconds: float | None
    error: ErrorInfo | None
    warnings: list[ErrorInfo]
    delivered: bool
    newSnapshotIds: list[str]
    notes: list[str]


class StartFromTagResult(TypedDict):
    started: bool
    executionArn: str
    executionName: str
    snapshotId: str
    reason: NotRequired[str]
