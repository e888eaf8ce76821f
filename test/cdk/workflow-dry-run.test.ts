import { inlinedWorkflowDefinition, reachable, synthTemplate, taskModule } from './support';

/** What makes or keeps outputs: none of it may run in a dry run, whatever fails. */
const OUTPUT_STATES = [
  'Target is a snapshot?',
  'Snapshot phase',
  'Create snapshots',
  'Direct snapshot phase',
  'Direct snapshots',
  'Check snapshots',
  'Delivered',
  'Register image',
  'Enable fast snapshot restore',
  'Teardown',
  'Teardown with warnings',
];

describe('dry run path of the state machine', () => {
  const template = synthTemplate();
  // the launch attempt inlined where Run attempt starts it
  const definition = inlinedWorkflowDefinition(template);
  const dryRun = reachable(definition, 'Estimated');

  test("the attempt's compaction loop ends in the Dry run? Choice: $.plan.dryRun true → the attempt ends, and the workflow goes on to Estimated; else the snapshots (whatever the target)", () => {
    expect(definition.States['Compaction: done'].Next).toBe('Dry run?');
    const choice = definition.States['Dry run?'];
    expect(choice.Type).toBe('Choice');
    const dryRun = {
      And: [
        { Variable: '$.plan.dryRun', IsPresent: true },
        { Variable: '$.plan.dryRun', BooleanEquals: true },
      ],
    };
    expect(choice.Choices).toEqual([{ ...dryRun, Next: 'Attempt done' }]);
    expect(choice.Default).toBe('Target is a snapshot?');
    expect(definition.States['Attempt done'].Next).toBe('Attempt outcome?');
    // an error first (the attempt's error ends it too), then the dry run
    expect(definition.States['Attempt outcome?'].Choices).toEqual([
      { Variable: '$.error', IsPresent: true, Next: 'Launch again?' },
      { ...dryRun, Next: 'Estimated' },
    ]);
    expect(definition.States['Estimated']).toMatchObject({
      Type: 'Pass',
      Result: 'estimated',
      ResultPath: '$.outcome',
    });
  });

  test('no state that makes a snapshot, an AMI or FSR is reachable from the dry run path, not even on errors', () => {
    for (const name of OUTPUT_STATES) {
      expect({ name, reachable: dryRun.has(name) }).toEqual({ name, reachable: false });
    }
    const tasks = [...dryRun].filter((name) => definition.States[name].Type === 'Task').sort();
    expect(tasks).toEqual(['Dry run report', 'Dry run teardown', 'Report failure', 'Teardown after failure']);
    // ... while the compaction path does reach them
    expect(reachable(definition, 'Snapshot phase').has('Create snapshots')).toBe(true);
    expect(reachable(definition, 'Direct snapshot phase').has('Check snapshots')).toBe(true);
  });

  test('teardown keeps nothing, then the report is the output', () => {
    const teardown = definition.States['Dry run teardown'];
    expect(taskModule(template, teardown)).toBe('teardown');
    expect(teardown.Parameters).toMatchObject({
      'executionName.$': '$$.Execution.Name',
      outcome: 'failure',
      keep: { snapshotIds: [], 'imageId.$': "States.StringToJson('null')" },
    });
    expect(definition.States['Dry run teardown: done'].Next).toBe('Dry run: report phase');
    const report = definition.States['Dry run report'];
    expect(taskModule(template, report)).toBe('report');
    expect(report.ResultPath).toBe('$.report');
    expect(definition.States[report.Next!]).toEqual({ Type: 'Succeed', OutputPath: '$.report' });
    expect(definition.States['Dry run: teardown phase'].Parameters).toMatchObject({
      'teardown.$': '$$.State.EnteredTime',
    });
  });

  test('every task of the dry run path catches into the failure chain', () => {
    for (const name of ['Dry run teardown', 'Dry run report']) {
      const catches = definition.States[name].Catch ?? [];
      expect(catches.at(-1)).toEqual({ ErrorEquals: ['States.ALL'], Next: 'Failure', ResultPath: '$.error' });
    }
    expect(definition.States['Dry run teardown: gave up'].Next).toBe('Failure');
  });
});
