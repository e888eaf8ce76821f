/**
 * The tag keys and values the IAM policies of this stack condition on, as lambdas/compactor/tags.py puts
 * them (test/cdk/tags.test.ts reads tags.py and fails if the two ever differ).
 */

/** Every resource the workflow makes carries the stack name here; every grant that changes something needs it. */
export const STACK_TAG = 'ebs-snapshot-compactor:stack';
/** The execution name of the workflow execution that made the resource (teardown finds its leftovers by it). */
export const EXECUTION_TAG = 'ebs-snapshot-compactor:execution';
/** What the resource is to the execution: transfer-instance, source-volume, snapshot, image. */
export const ROLE_TAG = 'ebs-snapshot-compactor:role';
/** ROLE_TAG's value on a new snapshot (CreateSnapshot of a target volume, or StartSnapshot of a direct one). */
export const SNAPSHOT_ROLE = 'snapshot';
/**
 * Put by check_snapshots on the new snapshots once all are completed, and by register_image on the new AMI at
 * RegisterImage; no role may delete, deregister or untag what carries it (lib/delivered-outputs.ts).
 */
export const DELIVERED_TAG = 'ebs-snapshot-compactor:delivered';
/** The only value DELIVERED_TAG ever has. */
export const DELIVERED_VALUE = 'true';
/**
 * On a direct snapshot: the ARN of the transfer instance that writes it, put by StartSnapshot. The instance role's
 * EBS direct grant matches it against the caller's ec2:SourceInstanceArn.
 */
export const WRITER_INSTANCE_TAG = 'ebs-snapshot-compactor:writer-instance';
