// What every script of the AMQP suite shares: the settings the xunit wrapper
// (tests/Farm.EndToEnd.Tests/AmqpSdkTests.cs) passes, the client options an application would use
// against a local broker, the `farm` command for counts, and deadline-based waits.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { isServiceBusError, ServiceBusError } from "@azure/service-bus";

const run = promisify(execFile);

/**
 * FARM_AMQP_TEST is a JSON object the wrapper writes: connection strings (`root`, `sendOnly`,
 * `listenOnly`, ...), entity names, the `farm` command (`cli`: argv prefix, `data`: the farm's data
 * directory) and, for the failover script, the files it signals through.
 */
export const settings = JSON.parse(process.env.FARM_AMQP_TEST ?? "null") ?? (() => {
  throw new Error("FARM_AMQP_TEST is not set: these scripts are run by AmqpSdkTests (dotnet test --filter AmqpSdk).");
})();

/**
 * The SDK's defaults (3 retries, 30 s apart, 60 s per try) suit Azure; against a broker on this
 * machine an application would retry sooner, and so do the tests, so a failover or a refusal shows
 * within seconds. (A function: the SDK writes into the options object it is given.)
 */
export const localRetryOptions = () => ({ maxRetries: 10, retryDelayInMs: 500, timeoutInMs: 10_000 });

/** For calls that are meant to fail: one quick retry of a retryable error, then the error. */
export const failFastRetryOptions = () => ({ maxRetries: 1, retryDelayInMs: 200, timeoutInMs: 5_000 });

/** `farm ARGS --data DIR --json`, parsed. */
export async function farmJson(...args) {
  const [file, ...prefix] = settings.cli;
  const { stdout } = await run(file, [...prefix, ...args, "--data", settings.data, "--json"], { timeout: 60_000 });
  return JSON.parse(stdout);
}

/** `farm ARGS --data DIR`: its exit code and output, without throwing on a non-zero exit. */
export async function farmExit(...args) {
  const [file, ...prefix] = settings.cli;
  try {
    const { stdout, stderr } = await run(file, [...prefix, ...args, "--data", settings.data], { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    if (typeof error.code !== "number") throw error;
    return { code: error.code, stdout: error.stdout, stderr: error.stderr };
  }
}

/** The queue's counts as `farm queue show Q --json` gives them: active, scheduled, deferred, dead_letter, locked, total. */
export async function queueCounts(queue) {
  return (await farmJson("queue", "show", queue)).counts;
}

/** Waits until `condition()` is truthy, checking every `pollMs`; throws naming `what` past `withinMs`. */
export async function until(condition, withinMs, what, pollMs = 50) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`Timed out after ${withinMs} ms waiting until ${what}.`);
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

/** Resolves once the clock has passed `instant` (a Date): for waiting out a lock the broker said ends then. */
export async function clockPasses(instant, marginMs = 0) {
  const due = instant.getTime() + marginMs;
  while (Date.now() < due) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(1000, due - Date.now() + 1)));
  }
}

/** Receives until `count` messages came or `withinMs` passed (receiveMessages may return fewer per call). */
export async function receiveAtLeast(receiver, count, withinMs = 15_000) {
  const messages = [];
  const deadline = Date.now() + withinMs;
  while (messages.length < count && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(count - messages.length, { maxWaitTimeInMs: Math.max(500, Math.min(5_000, deadline - Date.now())) });
    messages.push(...batch);
  }
  return messages;
}

/**
 * The ServiceBusError code a promise failed with (asserting it failed), for
 * `assert.equal(await codeOf(p), "...")`. Two quirks of the SDK's own error handling are undone:
 * after retrying a retryable error it throws an AggregateError of every try's error (all must
 * carry the same code); and core-amqp 4.4's retry() re-translates a receiver's refused attach into
 * core-amqp's MessagingError ("UnauthorizedError" rather than "UnauthorizedAccess"), which the
 * SDK's own ServiceBusError constructor maps back, as it does everywhere else.
 */
export async function codeOf(promise) {
  try {
    await promise;
  } catch (error) {
    const errors = error instanceof AggregateError ? error.errors : [error];
    const codes = [...new Set(errors.map((e) => {
      if (isServiceBusError(e)) return e.code;
      if (e?.name === "MessagingError") return new ServiceBusError(e).code;
      return `${e?.name}: ${e?.message}`;
    }))];
    if (codes.length === 1 && errors.every((e) => isServiceBusError(e) || e?.name === "MessagingError")) return codes[0];
    throw new Error(`Expected Service Bus errors of one code, got ${JSON.stringify(codes)}`, { cause: error });
  }
  throw new Error("Expected the call to fail, but it succeeded.");
}

/** A value as JSON can carry it with its JavaScript type: for printing what a message held. */
export function typed(value) {
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return { type: "buffer", hex: Buffer.from(value).toString("hex") };
  if (value instanceof Date) return { type: "date", iso: value.toISOString() };
  if (value === null) return { type: "null" };
  if (typeof value === "object" && value?.constructor?.name === "Long") return { type: "long", value: value.toString() };
  if (typeof value === "object" && value !== null && "descriptor" in value && "value" in value) {
    return { type: "described", descriptor: String(value.descriptor), value: typed(value.value) };
  }
  return { type: typeof value, value };
}
