export function waitUntilServing(
  baseUrl: string,
  timeoutMs: number,
  cancelled: () => boolean,
): Promise<string | undefined>;
export class InvalidConfigurationError extends Error {}
