import { Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { DELIVERED_TAG, DELIVERED_VALUE } from './tags';

/**
 * "A delivered output is never deleted", backed by IAM and not only by teardown's code: explicit Denies for every
 * role that may delete or deregister the stack's resources (the task role, the sweeper's role).
 *
 * - No DeleteSnapshot / DeregisterImage of a snapshot or AMI that carries the delivered tag, whatever its value.
 * - No DeleteTags on such a resource: DeleteTags without keys removes every tag, so the keys a request names
 *   cannot tell whether it lifts the Deny above.
 * - No CreateTags that sets the delivered tag to anything but `true`: overwriting it is the other way to lift it.
 *
 * The workflow's own steps are not in the way: check_snapshots tags new snapshots delivered only once all of
 * them are completed, so a run that fails before that deletes them; register_image registers the AMI with the
 * tag (it exists only after the snapshots were delivered, and teardown keeps it from then on).
 */
export function deliveredOutputDenies(stack: Stack): iam.PolicyStatement[] {
  const outputs = ['snapshot', 'image'].map((resource) =>
    stack.formatArn({ service: 'ec2', account: '', resource, resourceName: '*' }),
  );
  const carriesTheTag = { Null: { [`aws:ResourceTag/${DELIVERED_TAG}`]: 'false' } };
  return [
    new iam.PolicyStatement({
      sid: 'NeverDeleteDeliveredOutputs',
      effect: iam.Effect.DENY,
      actions: ['ec2:DeleteSnapshot', 'ec2:DeregisterImage'],
      resources: outputs,
      conditions: carriesTheTag,
    }),
    new iam.PolicyStatement({
      sid: 'NeverUntagDeliveredOutputs',
      effect: iam.Effect.DENY,
      actions: ['ec2:DeleteTags'],
      resources: outputs,
      conditions: carriesTheTag,
    }),
    new iam.PolicyStatement({
      sid: 'TheDeliveredTagIsOnlyEverTrue',
      effect: iam.Effect.DENY,
      actions: ['ec2:CreateTags'],
      resources: outputs,
      conditions: {
        'ForAnyValue:StringEquals': { 'aws:TagKeys': [DELIVERED_TAG] },
        StringNotEquals: { [`aws:RequestTag/${DELIVERED_TAG}`]: DELIVERED_VALUE },
      },
    }),
  ];
}
