import { startTemplateServer } from './template-cache';

export default function globalSetup(): void {
  startTemplateServer();
}
