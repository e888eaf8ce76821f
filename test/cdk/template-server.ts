/**
 * The template server of a jest run (started by test/cdk/global-setup.ts, one process): it synthesizes
 * each context the test files ask for once and writes the template where every file reads it
 * (template-cache.ts). In a test file's own module registry, aws-cdk-lib loads anew and the CDK's built-in
 * CloudFormation validation builds its engine anew: about 10 CPU-seconds before the first template of
 * each file, 1 to 3 for each further one. Here that is paid once.
 */
import * as fs from 'fs';
import { freshTemplate } from './stack-synth';
import { answerFiles, pendingRequests, writeAtomically } from './template-cache';

const dir = process.argv[2];

function serve(): void {
  for (const request of pendingRequests(dir)) {
    const answer = answerFiles(dir, request.key);
    if (!fs.existsSync(answer.template) && !fs.existsSync(answer.error)) {
      try {
        writeAtomically(answer.template, JSON.stringify(freshTemplate(request.context).toJSON()));
      } catch (error) {
        writeAtomically(
          answer.error,
          error instanceof Error ? (error.stack ?? error.message) : String(error),
        );
      }
    }
    fs.rmSync(request.file, { force: true });
  }
}

// Polled: a request is a file (a test waits for its answer synchronously); a readdir every 50 ms costs nothing.
setInterval(serve, 50);
// jest died or was interrupted (its globalTeardown stops this server otherwise): nobody is left to ask.
function leave(): void {
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
process.on('disconnect', leave);
process.on('SIGINT', leave);
