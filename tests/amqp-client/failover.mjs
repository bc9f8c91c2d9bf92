// A sender loop and a subscribe() receiver through one node's AMQP endpoint while AmqpSdkTests
// SIGKILLs the node that owns the queue's container. Handshake through files the wrapper names:
// this script creates `readyFile` once messages flow, waits for the wrapper to create `killedFile`,
// goes on until both sending and completing have recovered, stops sending, lets the receiver
// catch up, and prints what happened as JSON on stdout for the wrapper to check (with a final
// drain of the queue through Farm's SDK):
//   acked      every messageId whose sendMessages resolved
//   completed  every messageId whose completeMessage resolved
//   deliveredAfterCompletion  deliveries of an id after its completeMessage had resolved (must be none)
import { existsSync, writeFileSync } from "node:fs";
import { ServiceBusClient } from "@azure/service-bus";
import { localRetryOptions, settings, until } from "./farm.mjs";

const { connection, queue, readyFile, killedFile } = settings.failover;
const startedAt = Date.now();
const elapsed = () => Date.now() - startedAt;

// As an application against a local broker would (and says so): retries 500 ms apart, 10 of them,
// 10 s per try, instead of the SDK's 3 retries 30 s apart.
const client = new ServiceBusClient(connection, { retryOptions: localRetryOptions() });

const acked = [];
const sendErrors = [];
const deliveries = [];
const completed = new Map(); // messageId -> ms when completeMessage resolved
const completeErrors = [];
const processErrors = [];
const deliveredAfterCompletion = [];
let killedAt = null;
let sending = true;

function describe(error) {
  const errors = error instanceof AggregateError ? error.errors : [error];
  return errors.map((e) => `${e?.code ?? e?.name}: ${e?.message}`).join(" | ");
}

async function sendLoop() {
  const sender = client.createSender(queue);
  for (let n = 0; sending; n++) {
    const messageId = `failover-${n}`;
    try {
      await sender.sendMessages({ body: { n }, messageId });
      acked.push({ messageId, at: elapsed() });
    } catch (error) {
      sendErrors.push({ messageId, at: elapsed(), error: describe(error) });
    }
    // About 50 a second: enough to be sending when the node dies, not so many that two cores drown.
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await sender.close();
}

const receiver = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
const subscription = receiver.subscribe({
  processMessage: async (message) => {
    const { messageId } = message;
    const at = elapsed();
    deliveries.push({ messageId, at, deliveryCount: message.deliveryCount });
    if (completed.has(messageId)) {
      deliveredAfterCompletion.push({ messageId, completedAt: completed.get(messageId), deliveredAt: at });
    }
    try {
      await receiver.completeMessage(message);
      if (!completed.has(messageId)) completed.set(messageId, elapsed());
    } catch (error) {
      completeErrors.push({ messageId, at: elapsed(), error: describe(error) });
    }
  },
  processError: async (args) => {
    processErrors.push({ at: elapsed(), source: args.errorSource, error: describe(args.error) });
  },
}, { autoCompleteMessages: false, maxConcurrentCalls: 4 });

const sendingDone = sendLoop();
let result = {};
let failure = null;
try {
  await until(() => acked.length >= 30 && completed.size >= 20, 60_000, "30 sends and 20 completions went through before the kill");
  writeFileSync(readyFile, `${elapsed()}\n`);
  await until(() => existsSync(killedFile), 90_000, "the wrapper killed the owner", 25);
  killedAt = elapsed();
  const ackedBefore = acked.length;
  const completedBefore = completed.size;
  await until(() => acked.length >= ackedBefore + 30 && completed.size >= completedBefore + 30, 90_000,
    "30 more sends and 30 more completions after the kill");
  sending = false;
  await sendingDone;
  const allAcked = () => acked.every(({ messageId }) => completed.has(messageId));
  await until(allAcked, 60_000, "every acknowledged message was completed").catch(() => undefined); // the wrapper drains what is left
  const firstAfter = (events) => events.find((e) => e.at > killedAt)?.at ?? null;
  result = {
    killedAt,
    firstAckAfterKill: firstAfter(acked),
    firstCompletionAfterKill: firstAfter([...completed.values()].sort((a, b) => a - b).map((at) => ({ at }))),
  };
} catch (error) {
  // Still print what happened: the wrapper shows it with the failure.
  failure = error.message;
  process.exitCode = 1;
} finally {
  sending = false;
  await sendingDone.catch(() => undefined);
  await subscription.close().catch(() => undefined);
  await receiver.close().catch(() => undefined);
  await client.close().catch(() => undefined);
}

console.log(JSON.stringify({
  failure,
  ...result,
  acked: acked.map((a) => a.messageId),
  completed: [...completed.keys()],
  deliveries: deliveries.length,
  redeliveries: deliveries.length - new Set(deliveries.map((d) => d.messageId)).size,
  deliveredAfterCompletion,
  sendErrors,
  completeErrors,
  processErrors,
  elapsedMs: elapsed(),
}));
