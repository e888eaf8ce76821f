import { Template } from 'aws-cdk-lib/assertions';
import { servedTemplateJson } from './template-cache';

/**
 * The stack's template with cdk.json's context (feature flags) plus the given keys, as the CLI would build it:
 * synthesized once per jest run for each context (template-cache.ts), so tests may ask again freely.
 */
export function synthTemplate(context: Record<string, unknown> = {}): Template {
  const served = servedTemplateJson(context);
  if (served) return Template.fromJSON(served);
  // Loaded only here: a file whose templates are all served never loads the stack's modules.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { freshTemplate } = require('./stack-synth') as typeof import('./stack-synth');
  return freshTemplate(context);
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface AslState {
  Type: string;
  Next?: string;
  End?: boolean;
  Resource?: string;
  Parameters?: Record<string, Json>;
  ResultPath?: string;
  Retry?: { ErrorEquals: string[]; MaxAttempts?: number; BackoffRate?: number; IntervalSeconds?: number }[];
  Catch?: { ErrorEquals: string[]; Next: string; ResultPath?: string }[];
  Choices?: (Record<string, Json> & { Next: string })[];
  Default?: string;
  Seconds?: number;
  ErrorPath?: string;
  CausePath?: string;
  OutputPath?: string;
  Result?: Json;
}

export interface AslDefinition {
  StartAt: string;
  States: Record<string, AslState>;
  TimeoutSeconds?: number;
}

export const FUNCTION_ARN_PREFIX = 'arn:aws:lambda:us-east-1:111122223333:function:';

/**
 * A state machine's definition as Step Functions sees it, with each function ARN token replaced by
 * FUNCTION_ARN_PREFIX + the function's logical id (what the twin does with real ARNs). `which` is the
 * construct: `Workflow` (the compaction workflow), `Cleanup` (the cleanup after a failed execution) or `Batch`.
 * Other references: `{"Ref": "AWS::Partition"}` → `aws`, `{"Ref": id}` → `REF(id)`.
 */
export function stateMachineDefinition(
  template: Template,
  which: 'Workflow' | 'WorkflowAttempt' | 'Cleanup' | 'Batch' = 'Workflow',
): AslDefinition {
  const all = template.findResources('AWS::StepFunctions::StateMachine');
  expect(Object.keys(all)).toHaveLength(4);
  const machines = Object.entries(all)
    .filter(([id]) => id.startsWith(`${which}StateMachine`))
    .map(([, machine]) => machine);
  expect(machines).toHaveLength(1);
  const definition = machines[0].Properties.DefinitionString;
  const parts: unknown[] = definition['Fn::Join'] ? definition['Fn::Join'][1] : [definition];
  const text = parts
    .map((part) => {
      if (typeof part === 'string') return part;
      const getAtt = (part as { 'Fn::GetAtt'?: [string, string] })['Fn::GetAtt'];
      if (getAtt && getAtt[1] === 'Arn') return `${FUNCTION_ARN_PREFIX}${getAtt[0]}`;
      const ref = (part as { Ref?: string }).Ref;
      if (ref === 'AWS::Partition') return 'aws';
      if (ref) return `REF(${ref})`;
      throw new Error(`unexpected token in the definition: ${JSON.stringify(part)}`);
    })
    .join('');
  return JSON.parse(text) as AslDefinition;
}

/**
 * The compaction workflow as one graph (what the twin's execution.inlined() makes of it): the launch attempt's
 * states in place of `Run attempt`, the Task that starts it. Edges to `Run attempt` lead to the attempt's
 * StartAt; the attempt's Succeed states go on to the Task's Next.
 */
export function inlinedWorkflowDefinition(template: Template): AslDefinition {
  const parent = stateMachineDefinition(template, 'Workflow');
  const attempt = stateMachineDefinition(template, 'WorkflowAttempt');
  const task = parent.States['Run attempt'];
  const states: Record<string, AslState> = {};
  for (const [name, state] of Object.entries(parent.States)) if (name !== 'Run attempt') states[name] = state;
  for (const [name, state] of Object.entries(attempt.States)) {
    if (name in parent.States) throw new Error(`state "${name}" is in the workflow and its attempt`);
    states[name] = state.Type === 'Succeed' ? { Type: 'Pass', Next: task.Next } : state;
  }
  const flat = JSON.parse(JSON.stringify({ ...parent, States: states })) as AslDefinition;
  const redirect = (holder: { Next?: string; Default?: string }) => {
    if (holder.Next === 'Run attempt') holder.Next = attempt.StartAt;
    if (holder.Default === 'Run attempt') holder.Default = attempt.StartAt;
  };
  for (const state of Object.values(flat.States)) {
    redirect(state);
    for (const rule of state.Choices ?? []) redirect(rule);
    for (const c of state.Catch ?? []) redirect(c);
  }
  if (flat.StartAt === 'Run attempt') flat.StartAt = attempt.StartAt;
  return flat;
}

/** Handler module of each function, by logical id (e.g. TasksPrepareA6451BC8 → prepare). */
export function moduleByLogicalId(template: Template): Record<string, string> {
  const functions = template.findResources('AWS::Lambda::Function');
  return Object.fromEntries(
    Object.entries(functions).map(([id, fn]) => [
      id,
      String(fn.Properties.Handler)
        .replace(/^compactor\.handlers\./, '')
        .replace(/\.handler$/, ''),
    ]),
  );
}

/** The handler module a Task state runs. */
export function taskModule(template: Template, state: AslState): string {
  const modules = moduleByLogicalId(template);
  const id = (state.Resource ?? '').replace(FUNCTION_ARN_PREFIX, '');
  const module = modules[id];
  if (!module) throw new Error(`Task resource ${state.Resource} is not a function of the stack`);
  return module;
}

/** Every state a state can go to next (Next, Choice branches, Default, Catch targets). */
export function successors(state: AslState): string[] {
  return [
    ...(state.Next ? [state.Next] : []),
    ...(state.Choices ?? []).map((choice) => choice.Next),
    ...(state.Default ? [state.Default] : []),
    ...(state.Catch ?? []).map((c) => c.Next),
  ];
}

/** Every state reachable from `from` (itself included), not following the transitions of the states in `notThrough`. */
export function reachable(definition: AslDefinition, from: string, notThrough: string[] = []): Set<string> {
  const seen = new Set<string>();
  const todo = [from];
  while (todo.length > 0) {
    const name = todo.pop()!;
    if (seen.has(name)) continue;
    seen.add(name);
    if (!notThrough.includes(name)) todo.push(...successors(definition.States[name]));
  }
  return seen;
}

/**
 * A role may not delete, deregister, untag or re-tag a delivered output (lib/delivered-outputs.ts): the three
 * explicit Denies, as synthesized, among `statements` (a role's policy statements).
 */
export function expectDeliveredOutputDenies(
  statements: { Sid?: string; Effect?: string; Action: unknown; Resource: unknown; Condition?: unknown }[],
): void {
  const delivered = 'ebs-snapshot-compactor:delivered';
  const denies = Object.fromEntries(
    statements.filter((s) => s.Effect === 'Deny' && s.Sid).map((s) => [s.Sid as string, s]),
  );
  const outputs = JSON.stringify([
    denies.NeverDeleteDeliveredOutputs?.Resource,
    denies.NeverUntagDeliveredOutputs?.Resource,
    denies.TheDeliveredTagIsOnlyEverTrue?.Resource,
  ]);
  expect(outputs.match(/::snapshot\/\*/g)).toHaveLength(3);
  expect(outputs.match(/::image\/\*/g)).toHaveLength(3);
  const carriesTheTag = { Null: { [`aws:ResourceTag/${delivered}`]: 'false' } };
  expect(denies.NeverDeleteDeliveredOutputs).toMatchObject({
    Action: ['ec2:DeleteSnapshot', 'ec2:DeregisterImage'],
    Condition: carriesTheTag,
  });
  expect(denies.NeverUntagDeliveredOutputs).toMatchObject({
    Action: 'ec2:DeleteTags',
    Condition: carriesTheTag,
  });
  expect(denies.TheDeliveredTagIsOnlyEverTrue).toMatchObject({
    Action: 'ec2:CreateTags',
    Condition: {
      'ForAnyValue:StringEquals': { 'aws:TagKeys': [delivered] },
      StringNotEquals: { [`aws:RequestTag/${delivered}`]: 'true' },
    },
  });
}

/** A task role's description names its function (lib/task-role.ts TaskRoles). */
const TASK_ROLE = /^ebs-snapshot-compactor task (\w+): /;

type PolicyStatementJson = { Sid?: string; Effect?: string; Action: string | string[]; Resource: unknown };

/** module -> the inline statements of that workflow task's own role. */
export function taskRoleStatementsByModule<S = PolicyStatementJson>(template: Template): Record<string, S[]> {
  const out: Record<string, S[]> = {};
  for (const role of Object.values(template.findResources('AWS::IAM::Role'))) {
    const module = TASK_ROLE.exec(String(role.Properties.Description ?? ''))?.[1];
    if (!module) continue;
    out[module] = (role.Properties.Policies ?? []).flatMap(
      (policy: { PolicyDocument: { Statement: S[] } }) => policy.PolicyDocument.Statement,
    );
  }
  return out;
}

/**
 * Every statement any task role has, each once: what the task functions may do between them (tests of one
 * statement's conditions read it here; which function has it, taskRoleStatementsByModule).
 */
export function taskRoleStatements<S = PolicyStatementJson>(template: Template): S[] {
  const seen = new Map<string, S>();
  for (const statements of Object.values(taskRoleStatementsByModule<S>(template))) {
    for (const statement of statements) seen.set(JSON.stringify(statement), statement);
  }
  return [...seen.values()];
}
