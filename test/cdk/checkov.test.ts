import { Template } from 'aws-cdk-lib/assertions';
import { CHECKOV_SUPPRESSIONS } from '../../lib/checkov-suppressions';
import { synthTemplate } from './support';

/**
 * lib/checkov-suppressions.json is the one list of checkov checks the templates fail on purpose: each is written
 * into the Metadata (checkov.skip) of exactly the resources it names, with its reason, and none is stale. checkov
 * itself runs on the synthesized templates in `make test-cdk` (mk/cdk.mk) and fails on any other failed check.
 */

interface Skip {
  id: string;
  comment: string;
}

interface CfnResource {
  Type: string;
  Metadata?: { 'aws:cdk:path'?: string; checkov?: { skip?: Skip[] } };
}

/** check id -> the CloudFormation types and construct paths (below the stack) it is skipped on. */
function skipped(template: Template): Map<string, { type: string; path: string; comment: string }[]> {
  const found = new Map<string, { type: string; path: string; comment: string }[]>();
  for (const resource of Object.values(template.toJSON().Resources) as CfnResource[]) {
    const path = String(resource.Metadata?.['aws:cdk:path'] ?? '').replace(/^[^/]+\//, '');
    for (const skip of resource.Metadata?.checkov?.skip ?? []) {
      const list = found.get(skip.id) ?? [];
      list.push({ type: resource.Type, path, comment: skip.comment });
      found.set(skip.id, list);
    }
  }
  return found;
}

describe('checkov suppressions', () => {
  // the stack's own VPC (cdk.json's context), and a given VPC with the Image Builder trigger: what make test-cdk scans
  // path metadata (aws:cdk:path), as the CLI's synth writes it: where each skip landed
  const paths = { 'aws:cdk:enable-path-metadata': true };
  const templates = [
    synthTemplate(paths),
    synthTemplate({
      ...paths,
      vpcId: 'vpc-0123456789abcdef0',
      subnetIds: 'subnet-0123456789abcdef0,subnet-0fedcba9876543210',
      imageBuilderPipelineArns: 'arn:aws:imagebuilder:us-east-1:111122223333:image-pipeline/golden-al2023',
    }),
  ];
  const found = templates.map(skipped);

  test.each(CHECKOV_SUPPRESSIONS.map((s) => [`${s.check} ${s.where}`, s] as const))(
    '%s: written, with its reason, on the resources it names',
    (_, suppression) => {
      const hits = found
        .flatMap((byCheck) => byCheck.get(suppression.check) ?? [])
        .filter((hit) => hit.comment === suppression.reason);
      expect(hits.length).toBeGreaterThan(0);
      for (const hit of hits) {
        expect(hit.type).toBe(suppression.resourceType);
        if (suppression.path) expect(hit.path).toMatch(new RegExp(suppression.path));
      }
    },
  );

  test('nothing else is skipped, and every reason is one line', () => {
    const known = new Set(CHECKOV_SUPPRESSIONS.map((s) => `${s.check}\n${s.reason}`));
    for (const byCheck of found) {
      for (const [check, hits] of byCheck) {
        for (const hit of hits) expect(known.has(`${check}\n${hit.comment}`)).toBe(true);
      }
    }
    for (const s of CHECKOV_SUPPRESSIONS) expect(s.reason).not.toMatch(/\n/);
  });

  test('a task function is not skipped what applies only to the triggers', () => {
    const prepare = (found[0].get('CKV_AWS_116') ?? []).filter((hit) =>
      hit.path.startsWith('Tasks/Prepare/'),
    );
    expect(prepare).toHaveLength(1);
    expect(prepare[0].comment).toMatch(/synchronously/);
  });
});
