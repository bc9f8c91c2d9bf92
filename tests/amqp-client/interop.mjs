// Messages between the JS SDK over AMQP and Farm's own .NET SDK over gRPC; AmqpSdkTests runs the
// phases between its .NET steps and asserts on the JSON each prints on stdout:
//   node interop.mjs send-for-dotnet QUEUE        sends the messages listed in `sentForDotnet` below
//   node interop.mjs receive-from-dotnet QUEUE N  receives N messages (peekLock), completes them, prints them
import { ServiceBusClient } from "@azure/service-bus";
import { localRetryOptions, receiveAtLeast, settings, typed } from "./farm.mjs";

const [phase, queue, countText] = process.argv.slice(2);

/** What the JS SDK sends; the wrapper checks what Farm's SDK makes of each. */
const sentForDotnet = [
  { messageId: "js-string", body: "hello from js" },
  { messageId: "js-object", body: { order: 12, lines: ["a", "b"], paid: true } },
  { messageId: "js-number", body: 42.5 },
  { messageId: "js-buffer", body: Buffer.from([0, 1, 2, 255]) },
].map((message) => ({
  ...message,
  correlationId: "corr-js",
  subject: "subject-js",
  contentType: "application/x-js",
  to: "to-js",
  replyTo: "reply-js",
  timeToLive: 3_600_000,
  applicationProperties: {
    s: "text", i: 7, zero: 0, neg: -3, d: 2.5, b: true, when: new Date("2026-05-04T03:02:01.250Z"), big: 2 ** 40,
  },
}));

const client = new ServiceBusClient(settings.root, { retryOptions: localRetryOptions() });
try {
  if (phase === "send-for-dotnet") {
    const sender = client.createSender(queue);
    await sender.sendMessages(sentForDotnet);
    await sender.close();
    console.log(JSON.stringify({ sent: sentForDotnet.map((m) => m.messageId) }));
  } else if (phase === "receive-from-dotnet") {
    const count = Number(countText);
    const receiver = client.createReceiver(queue, { skipConvertingDate: true });
    const messages = await receiveAtLeast(receiver, count, 30_000);
    const printed = messages.map((m) => ({
      messageId: m.messageId,
      body: typed(m.body),
      bodyType: m._rawAmqpMessage?.bodyType ?? null,
      correlationId: m.correlationId ?? null,
      subject: m.subject ?? null,
      contentType: m.contentType ?? null,
      to: m.to ?? null,
      replyTo: m.replyTo ?? null,
      timeToLive: m.timeToLive ?? null,
      deliveryCount: m.deliveryCount,
      sequenceNumber: m.sequenceNumber?.toString() ?? null,
      enqueuedTimeUtc: m.enqueuedTimeUtc?.toISOString() ?? null,
      lockedUntilUtc: m.lockedUntilUtc?.toISOString() ?? null,
      applicationProperties: Object.fromEntries(Object.entries(m.applicationProperties ?? {}).map(([k, v]) => [k, typed(v)])),
    }));
    for (const message of messages) await receiver.completeMessage(message);
    await receiver.close();
    console.log(JSON.stringify({ received: printed }));
  } else {
    throw new Error(`Unknown phase '${phase}': send-for-dotnet QUEUE | receive-from-dotnet QUEUE N`);
  }
} finally {
  await client.close();
}
