import { CURRENTLY_RECOMMENDED_FLAGS } from 'aws-cdk-lib/cx-api';
import { CDK_JSON_CONTEXT } from './cdk-json';

/** Flags cdk.json sets against aws-cdk-lib's recommendation, each with its reason. */
const NOT_AS_RECOMMENDED: Record<string, string> = {
  '@aws-cdk/core:enableAdditionalMetadataCollection':
    'no construct usage data in the AWS::CDK::Metadata resource beyond the library versions: an offline-first ' +
    'tool with CLI telemetry off does not add more.',
};

describe('cdk.json', () => {
  test('turns the CDK CLI telemetry off (also CDK_DISABLE_CLI_TELEMETRY=true, or `cdk cli-telemetry --disable`)', () => {
    expect(CDK_JSON_CONTEXT['cli-telemetry']).toBe(false);
  });

  test('sets every feature flag aws-cdk-lib recommends, so a new release does not change the template', () => {
    const unset = Object.keys(CURRENTLY_RECOMMENDED_FLAGS).filter((flag) => !(flag in CDK_JSON_CONTEXT));
    expect(unset).toEqual([]);
  });

  test('sets them to the recommended values, except the ones listed with a reason', () => {
    const different = Object.entries(CURRENTLY_RECOMMENDED_FLAGS)
      .filter(([flag, value]) => JSON.stringify(CDK_JSON_CONTEXT[flag]) !== JSON.stringify(value))
      .map(([flag]) => flag);
    expect(different.sort()).toEqual(Object.keys(NOT_AS_RECOMMENDED).sort());
  });
});
