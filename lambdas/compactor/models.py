"""Typed shapes of the JSON the handlers take and return, for mypy. What each key means, and
what is valid, is in contract/schemas/ (test/lambdas/test_schemas.py checks each TypedDict has
its schema's keys, required keys and JSON types). Keys are camelCase because they travel through
the state machine as they are. (No `from __future__ import annotations`: TypedDict needs the
real NotRequired[...] to know which keys are optional.)"""

from typing import Any, Literal, NotRequired, TypedDict

Method = Literal["allocated", "trim"]
# where the copy is written: a direct snapshot (EBS direct APIs) or a target volume
Target = Literal["snapshot", "volume"]
SourceKind = Literal["snapshot", "image"]
Market = Literal["spot", "on-demand"]
# teardown's outcome: what to delete (cleanup = failure, run by the cleanup state machine)
Outcome = Literal["success", "failure", "retry", "cleanup"]
# the report's outcome
ReportOutcome = Literal["success", "succeeded-with-warnings", "failure", "estimated"]


class SourceRef(TypedDict):
    kind: SourceKind
    snapshotId: NotRequired[str]
    imageId: NotRequired[str]


class VolumePlan(TypedDict):
    index: int
    sourceSnapshotId: str
    deviceName: str | None
    sizeGiB: int
    encrypted: bool
    kmsKeyId: str | None
    targetKmsKeyId: str | None
    sourceKmsKeyId: str | None
    sourceFullSizeBytes: int | None


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
    target: Target
    jobs: int
    verify: bool
    fastSnapshotRestoreAzs: list[str]
    kmsKeyId: str | None
    imageName: str | None
    tags: dict[str, str]
    sourcesReady: bool
    pendingSnapshotIds: list[str]
    instanceTypes: list[str]
    compactionPoll: CompactionPoll
    bytesToCopy: int
    dryRun: NotRequired[bool]
    notes: list[str]
    copySharing: NotRequired[bool]


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
    index: int
    snapshotId: str
    done: bool
    heldBlocks: int | None
    volumeSizeGiB: int | None
    nextToken: str | None
    nextBlockIndex: int
    parts: int
    blockListError: str | None


class SourceBlocksResult(TypedDict):
    complete: bool
    bundleKey: str | None
    volumes: list[BlockListVolume]
    pages: int


class AttachedVolume(TypedDict):
    index: int
    sourceVolumeId: str
    # None in a dry run and with target snapshot: no target volume
    targetVolumeId: str | None
    sourceDeviceName: str
    targetDeviceName: str | None


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
    # target snapshot: the direct snapshots start_compaction started, in volume index order
    # ([] for target volume and a dry run)
    directSnapshots: list["SnapshotItem"]


class CompactionProgress(TypedDict):
    """The data plane's last progress line (compactor/ssm/progress.py)."""

    phase: str
    percent: float
    bytesDone: int
    bytesTotal: int
    etaSeconds: int
    at: str


class CompactionResult(TypedDict):
    done: bool
    status: str
    summary: dict[str, Any] | None
    progress: CompactionProgress | None
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
    transientError: NotRequired[str]


class LaunchPermission(TypedDict):
    UserId: NotRequired[str]
    OrganizationArn: NotRequired[str]
    OrganizationalUnitArn: NotRequired[str]


class SnapshotSharing(TypedDict):
    snapshotId: str
    sourceSnapshotId: str
    userIds: list[str]


class SharingResult(TypedDict):
    launchPermissions: list[LaunchPermission]
    createVolumePermissions: list[SnapshotSharing]
    deprecationTime: str | None
    sourcePublic: bool
    notes: list[str]
    warnings: list[str]


class ImageResult(TypedDict):
    imageId: str | None
    warnings: list[str]
    sharing: NotRequired[SharingResult | None]


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
    deletedObjects: list[str]
    keptSnapshots: list[str]
    keptImages: list[str]
    transientErrors: list[str]
    leftToTimeOut: list[str]


class VolumeEstimate(TypedDict):
    sourceStoredBytes: int
    liveBytes: int | None
    predictedStoredBytes: int
    predictedSavingsBytes: int
    predictedSavingsPercent: float
    bytesToRead: int
    copySeconds: int | None


class Estimate(TypedDict):
    volumes: int
    sourceStoredBytes: int
    liveBytes: int | None
    predictedStoredBytes: int
    predictedSavingsBytes: int
    savingsPercent: float
    bytesToRead: int
    copySeconds: int | None


class VolumeReport(TypedDict):
    index: int
    sourceSnapshotId: str
    newSnapshotId: str | None
    targetSnapshotId: str | None
    sourceFullSizeBytes: int | None
    newFullSizeBytes: int | None
    sourceBytesRead: int | None
    targetBytesWritten: int | None
    writtenBlocks: int | None
    heldBlocks: int | None
    heldBlocksRead: int | None
    sourceConsistent: bool | None
    blockListError: str | None
    estimate: NotRequired[VolumeEstimate | None]


class ErrorInfo(TypedDict):
    Error: str
    Cause: str


class Report(TypedDict):
    outcome: ReportOutcome
    executionName: str | None
    target: Target | None
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
    dryRun: NotRequired[bool]
    sharing: NotRequired[SharingResult | None]
    estimate: NotRequired[Estimate | None]


class StartFromTagResult(TypedDict):
    started: bool
    executionArn: str
    executionName: str
    snapshotId: str
    reason: NotRequired[str]


class ImageBuilderStart(TypedDict):
    imageId: str
    executionName: str
    executionArn: str
    started: bool
    reason: NotRequired[str]


class StartFromImageBuilderResult(TypedDict):
    imageBuildVersionArn: str
    pipelineArn: str | None
    executions: list[ImageBuilderStart]
    ignored: str | None
