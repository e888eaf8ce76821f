import { stopTemplateServer } from './template-cache';

export default function globalTeardown(): void {
  stopTemplateServer();
}
