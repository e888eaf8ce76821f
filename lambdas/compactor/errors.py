"""Expected failures. Lambda reports an exception's class name as the error type, so each class
name below is the Step Functions error name the state machine branches on (docs/contract.md)."""


class CompactorError(Exception):
    """Base of the expected failures; the message names the problem and what to do."""


class InvalidInput(CompactorError):
    pass


class SnapshotNotFound(CompactorError):
    pass


class SnapshotInOtherRegion(CompactorError):
    pass


class SnapshotNotCompleted(CompactorError):
    pass


class SnapshotArchived(CompactorError):
    """A source snapshot is in the archive storage tier: it must be restored before use."""


class ImageNotFound(CompactorError):
    pass


class UnsupportedImage(CompactorError):
    pass


class KmsKeyNotUsable(CompactorError):
    pass


class VolumeTooLarge(CompactorError):
    pass


class TooManyVolumes(CompactorError):
    pass


class JobTooLarge(CompactorError):
    """The time the copy would take does not fit the state machine's timeout."""


class FastSnapshotRestoreLimitExceeded(CompactorError):
    pass


class NoSpotCapacity(CompactorError):
    pass


class NoCapacity(CompactorError):
    pass


class InstanceLost(CompactorError):
    pass


class InstanceLaunchFailed(CompactorError):
    """The instance terminated at launch for a Client.* reason (a KMS key it cannot use, a
    volume limit): launching again would fail the same way."""


class VolumeCreationFailed(CompactorError):
    """A source volume attach_volumes created from a source snapshot ended in state error."""


class InstanceNotReady(CompactorError):
    pass


class CompactionFailed(CompactorError):
    pass


class SnapshotFailed(CompactorError):
    pass


class ImageRegistrationFailed(CompactorError):
    pass


class SharingNotCopied(CompactorError):
    """copySharing: the AMI is registered, but not with all of the source's sharing."""


class TransientAwsError(CompactorError):
    """AWS still answered with throttling or a server error after the SDK's own retries; the
    state machine retries the task with backoff (a poll task reports "not done yet" instead)."""


class ConfigError(Exception):
    """The Lambda environment set by the stack is missing or invalid: a deployment problem."""
