import type { TestProject } from "vitest/node";
export default function setup(project: TestProject) {
  project.provide("redisRestUrl", "http://127.0.0.1:1");
  project.provide("redisRestToken", "t");
  project.provide("originUrl", "http://127.0.0.1:2");
}
declare module "vitest" {
  export interface ProvidedContext { redisRestUrl: string; redisRestToken: string; originUrl: string }
}
