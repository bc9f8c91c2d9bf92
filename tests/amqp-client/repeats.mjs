// Many sends in flight through one node's AMQP endpoint to a queue another node owns, while
// AmqpSdkTests cuts the TCP connections to that owner: the node forwarding them tries a send
// again when its connection broke before the owner answered, and the owner must store it once.
// Handshake through files the wrapper names: this script creates `readyFile` once sends flow and
// sends until the wrapper creates `stopFile`, then prints as JSON on stdout:
//   acked       every messageId whose sendMessages resolved
//   sendErrors  the sends that failed (their outcome is unknown to the sender)
import { existsSync, writeFileSync } from "node:fs";
import { ServiceBusClient } from "@azure/service-bus";
import { localRetryOptions, settings, until } from "./farm.mjs";

const { connection, queue, readyFile, stopFile, loops } = settings.repeats;
const client = new ServiceBusClient(connection, { retryOptions: localRetryOptions() });
const sender = client.createSender(queue);

const acked = [];
const sendErrors = [];
let sending = true;

// Each loop has one send in flight at a time: together they keep the forwarding node busy, so a
// cut nearly always finds a send the owner stored and had not answered yet.
async function sendLoop(loop) {
  for (let n = 0; sending; n++) {
    const messageId = `repeat-${loop}-${n}`;
    try {
      await sender.sendMessages({ body: { loop, n }, messageId });
      acked.push(messageId);
    } catch (error) {
      sendErrors.push({ messageId, error: `${error?.code ?? error?.name}: ${error?.message}` });
    }
  }
}

const sendersDone = Array.from({ length: loops }, (_, loop) => sendLoop(loop));
let failure = null;
try {
  await until(() => acked.length >= 200, 60_000, "200 sends went through");
  writeFileSync(readyFile, "ready\n");
  await until(() => existsSync(stopFile), 120_000, "the wrapper said stop", 25);
} catch (error) {
  failure = error.message;
  process.exitCode = 1;
} finally {
  sending = false;
  await Promise.all(sendersDone);
  await sender.close().catch(() => undefined);
  await client.close().catch(() => undefined);
}

console.log(JSON.stringify({ failure, acked, sendErrors }));
