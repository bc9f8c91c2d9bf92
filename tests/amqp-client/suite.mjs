// The unchanged @azure/service-bus SDK against Farm's AMQP front door, used as an application
// would. Run by AmqpSdkTests through `node --test-reporter=spec suite.mjs` with FARM_AMQP_TEST set;
// exits non-zero when any test fails. Each test uses entities of its own the wrapper created, so
// the counts `farm queue show` gives are exact.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { ServiceBusClient } from "@azure/service-bus";
import {
  clockPasses, codeOf, failFastRetryOptions, farmExit, localRetryOptions, queueCounts, receiveAtLeast, settings, until,
} from "./farm.mjs";

const { entities } = settings;
const clients = [];

/** A client on `connectionString`, closed when the suite ends. */
function clientFor(connectionString, retryOptions = localRetryOptions) {
  const client = new ServiceBusClient(connectionString, { retryOptions: retryOptions() });
  clients.push(client);
  return client;
}

const root = clientFor(settings.root);

after(async () => {
  await Promise.all(clients.map((client) => client.close()));
});

/** Receives and completes whatever is left, so the next test starts from an empty queue. */
async function drain(queue) {
  const receiver = root.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  try {
    while ((await receiver.receiveMessages(50, { maxWaitTimeInMs: 500 })).length > 0);
  } finally {
    await receiver.close();
  }
}

describe("send and receive", () => {
  test("single, array and createMessageBatch sends arrive; peekLock receiveMessages + completeMessage empties the queue", async () => {
    const queue = entities.send;
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: "one", messageId: "single-1" });
    await sender.sendMessages([{ body: "two", messageId: "array-1" }, { body: "three", messageId: "array-2" }]);
    const batch = await sender.createMessageBatch();
    for (const id of ["batch-1", "batch-2", "batch-3"]) {
      assert.ok(batch.tryAddMessage({ body: { id }, messageId: id }), `tryAddMessage(${id}) refused a small message`);
    }
    assert.equal(batch.count, 3);
    await sender.sendMessages(batch);
    await sender.close();
    assert.equal((await queueCounts(queue)).active, 6);

    const receiver = root.createReceiver(queue);
    const messages = await receiveAtLeast(receiver, 6);
    assert.deepEqual(messages.map((m) => m.messageId).sort(), ["array-1", "array-2", "batch-1", "batch-2", "batch-3", "single-1"]);
    const byId = Object.fromEntries(messages.map((m) => [m.messageId, m]));
    assert.equal(byId["single-1"].body, "one");
    assert.deepEqual(byId["batch-2"].body, { id: "batch-2" });
    for (const message of messages) {
      assert.match(message.lockToken ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      assert.equal(message.deliveryCount, 0, "the JS SDK shows the wire's deliveries-before-this one, 0 at first (as against Azure)");
      assert.ok(message.lockedUntilUtc > new Date(), "lockedUntilUtc is in the future");
      assert.ok(message.enqueuedTimeUtc instanceof Date);
    }
    const sequences = messages.map((m) => Number(m.sequenceNumber.toString()));
    assert.equal(new Set(sequences).size, 6, "sequence numbers are distinct");
    assert.equal((await queueCounts(queue)).locked, 6);

    for (const message of messages) await receiver.completeMessage(message);
    await receiver.close();
    assert.deepEqual(await root.createReceiver(queue).peekMessages(10), []);
    assert.equal((await queueCounts(queue)).total, 0);
  });

  test("bodies (string, JSON object, number, Buffer), the standard properties and application properties round-trip (receiveAndDelete)", async () => {
    const queue = entities.types;
    const when = new Date("2026-05-04T03:02:01.250Z");
    const applicationProperties = { s: "text", i: 7, neg: -3, d: 2.5, b: true, f: false, when, big: 2 ** 40 };
    const common = {
      correlationId: "corr-1", subject: "subject-1", contentType: "application/x-test", to: "to-1", replyTo: "reply-1",
      timeToLive: 3_600_000, applicationProperties,
    };
    const sent = [
      { ...common, messageId: "string", body: "hello" },
      { ...common, messageId: "object", body: { order: 12, lines: ["a", "b"], paid: true, note: null } },
      { ...common, messageId: "number", body: 42.5 },
      { ...common, messageId: "buffer", body: Buffer.from([0, 1, 2, 255]) },
    ];
    const sender = root.createSender(queue);
    await sender.sendMessages(sent);
    await sender.close();

    const receiver = root.createReceiver(queue, { receiveMode: "receiveAndDelete", skipConvertingDate: true });
    const received = await receiveAtLeast(receiver, 4);
    await receiver.close();
    assert.equal(received.length, 4);
    const byId = Object.fromEntries(received.map((m) => [m.messageId, m]));
    assert.equal(byId.string.body, "hello");
    assert.deepEqual(byId.object.body, { order: 12, lines: ["a", "b"], paid: true, note: null });
    assert.equal(byId.number.body, 42.5);
    assert.ok(Buffer.isBuffer(byId.buffer.body), `a Buffer body comes back a Buffer, not ${typeof byId.buffer.body}`);
    assert.deepEqual([...byId.buffer.body], [0, 1, 2, 255]);
    for (const message of received) {
      assert.equal(message.lockToken, undefined, "receiveAndDelete messages carry no lock");
      assert.deepEqual(
        [message.correlationId, message.subject, message.contentType, message.to, message.replyTo, message.timeToLive],
        ["corr-1", "subject-1", "application/x-test", "to-1", "reply-1", 3_600_000]);
      assert.deepEqual(message.applicationProperties, applicationProperties);
      assert.ok(message.applicationProperties.when instanceof Date);
      assert.ok(message.expiresAtUtc.getTime() - message.enqueuedTimeUtc.getTime() === 3_600_000, "expiresAtUtc = enqueued + ttl");
    }
    assert.equal((await queueCounts(queue)).total, 0, "receiveAndDelete removed them");
  });

  test("subscribe() in peekLock completes each message after the handler; in receiveAndDelete it takes them", async () => {
    const queue = entities.subscribe;
    const sender = root.createSender(queue);
    await sender.sendMessages([1, 2, 3].map((n) => ({ body: n, messageId: `peeklock-${n}` })));

    const seen = [];
    const errors = [];
    const receiver = root.createReceiver(queue);
    const subscription = receiver.subscribe({
      processMessage: async (message) => { seen.push(message); },
      processError: async (args) => { errors.push(`${args.errorSource}: ${args.error.code ?? ""} ${args.error.message}`); },
    }, { maxConcurrentCalls: 2 });
    await until(() => seen.length >= 3, 15_000, "subscribe() handled 3 messages");
    await until(async () => (await queueCounts(queue)).total === 0, 15_000, "the auto-completions emptied the queue");
    await subscription.close();
    await receiver.close();
    assert.deepEqual(seen.map((m) => m.messageId).sort(), ["peeklock-1", "peeklock-2", "peeklock-3"]);
    assert.ok(seen.every((m) => m.lockToken), "peekLock messages carry a lock token");

    await sender.sendMessages([1, 2].map((n) => ({ body: n, messageId: `deleted-${n}` })));
    await sender.close();
    const taken = [];
    const deleting = root.createReceiver(queue, { receiveMode: "receiveAndDelete" });
    const second = deleting.subscribe({
      processMessage: async (message) => { taken.push(message); },
      processError: async (args) => { errors.push(`${args.errorSource}: ${args.error.code ?? ""} ${args.error.message}`); },
    });
    await until(() => taken.length >= 2, 15_000, "subscribe() in receiveAndDelete took 2 messages");
    await second.close();
    await deleting.close();
    assert.deepEqual(taken.map((m) => m.messageId).sort(), ["deleted-1", "deleted-2"]);
    assert.deepEqual(errors, []);
    assert.equal((await queueCounts(queue)).total, 0);
  });
});

describe("settlement", () => {
  test("abandonMessage makes the message come back with a higher delivery count", async () => {
    const queue = entities.abandon;
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: "again", messageId: "abandoned" });
    await sender.close();
    const receiver = root.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
    const counts = [];
    for (let i = 0; i < 3; i++) {
      const [message] = await receiveAtLeast(receiver, 1);
      assert.equal(message?.messageId, "abandoned");
      counts.push(message.deliveryCount);
      if (i < 2) await receiver.abandonMessage(message, { abandonedTimes: i + 1 });
      else {
        assert.equal(message.applicationProperties.abandonedTimes, 2, "abandonMessage's properties to modify were applied");
        await receiver.completeMessage(message);
      }
    }
    await receiver.close();
    assert.deepEqual(counts, [0, 1, 2]);
    assert.equal((await queueCounts(queue)).total, 0);
  });

  /** Sends one message, dead-letters it with `reason`, and returns it as received from the dead-letter queue (completed there). */
  async function deadLetterOne(queue, messageId, reason) {
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: { order: 7 }, messageId, applicationProperties: { kind: "order" } });
    await sender.close();
    const receiver = root.createReceiver(queue);
    const [message] = await receiveAtLeast(receiver, 1);
    await receiver.deadLetterMessage(message, reason);
    await receiver.close();
    assert.deepEqual(await queueCounts(queue).then((c) => [c.active, c.dead_letter]), [0, 1]);

    const deadLetters = root.createReceiver(queue, { subQueueType: "deadLetter" });
    const [dead] = await receiveAtLeast(deadLetters, 1);
    await deadLetters.completeMessage(dead);
    await deadLetters.close();
    assert.equal((await queueCounts(queue)).total, 0);
    return dead;
  }

  test("deadLetterMessage moves the message to the dead-letter queue (subQueueType deadLetter)", async () => {
    const dead = await deadLetterOne(entities.deadLetter, "poison", { deadLetterReason: "BadOrder" });
    assert.equal(dead?.messageId, "poison");
    assert.deepEqual(dead.body, { order: 7 });
    assert.equal(dead.applicationProperties.kind, "order");
  });

  // The SDK puts them in the Rejected outcome's error info as a map with string keys.
  test("deadLetterMessage's reason and description are visible on the dead-letter queue", async () => {
    const dead = await deadLetterOne(entities.deadLetter, "poison-with-reason",
      { deadLetterReason: "BadOrder", deadLetterErrorDescription: "the order has no lines" });
    assert.equal(dead.deadLetterReason, "BadOrder");
    assert.equal(dead.deadLetterErrorDescription, "the order has no lines");
  });

  test("deferMessage hides it from receive; receiveDeferredMessages by sequence number returns it to complete", async () => {
    const queue = entities.defer;
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: "later", messageId: "deferred" });
    await sender.close();
    const receiver = root.createReceiver(queue);
    const [message] = await receiveAtLeast(receiver, 1);
    const sequenceNumber = message.sequenceNumber;
    await receiver.deferMessage(message);
    assert.equal((await queueCounts(queue)).deferred, 1);
    assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), [], "a deferred message is not received");

    const [deferred] = await receiver.receiveDeferredMessages(sequenceNumber);
    assert.equal(deferred?.messageId, "deferred");
    assert.equal(deferred.body, "later");
    assert.equal(deferred.state, "deferred");
    assert.ok(deferred.lockToken, "a deferred message received in peekLock is locked");
    await receiver.completeMessage(deferred);
    await receiver.close();
    assert.equal((await queueCounts(queue)).total, 0);
  });

  test("renewMessageLock moves lockedUntilUtc, and the message can be completed after its first lock would have ended", async () => {
    const queue = entities.lock; // lock duration 5 s
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: "hold", messageId: "renewed" });
    await sender.close();
    const receiver = root.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
    const [message] = await receiveAtLeast(receiver, 1);
    const first = message.lockedUntilUtc;
    const lockMs = first.getTime() - Date.now();
    assert.ok(lockMs > 2_000 && lockMs <= 5_500, `a 5 s lock, ${lockMs} ms left`);
    await clockPasses(new Date(first.getTime() - 2_500)); // half the lock gone
    const renewed = await receiver.renewMessageLock(message);
    assert.ok(renewed.getTime() >= first.getTime() + 2_000, `renewMessageLock moved the lock from ${first.toISOString()} to ${renewed.toISOString()}`);
    assert.equal(message.lockedUntilUtc.getTime(), renewed.getTime(), "the SDK keeps the new lockedUntilUtc on the message");
    await clockPasses(first, 500);
    await receiver.completeMessage(message);
    await receiver.close();
    assert.equal((await queueCounts(queue)).total, 0);
  });
});

describe("peek and schedule", () => {
  test("peekMessages shows the messages in order without locking them", async () => {
    const queue = entities.peek;
    const sender = root.createSender(queue);
    await sender.sendMessages([1, 2, 3].map((n) => ({ body: n, messageId: `peek-${n}` })));
    await sender.close();
    const receiver = root.createReceiver(queue);
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(peeked.map((m) => m.messageId), ["peek-1", "peek-2", "peek-3"]);
    assert.deepEqual(peeked.map((m) => m.body), [1, 2, 3]);
    assert.ok(peeked.every((m) => m.lockToken === undefined), "peeked messages are not locked");
    const sequences = peeked.map((m) => Number(m.sequenceNumber.toString()));
    assert.deepEqual(sequences, [...sequences].sort((a, b) => a - b));
    assert.equal((await queueCounts(queue)).locked, 0);
    const fromSecond = await receiver.peekMessages(10, { fromSequenceNumber: peeked[1].sequenceNumber });
    assert.deepEqual(fromSecond.map((m) => m.messageId), ["peek-2", "peek-3"]);

    const received = await receiveAtLeast(receiver, 3);
    assert.deepEqual(received.map((m) => m.deliveryCount), [0, 0, 0], "peeking is not a delivery");
    for (const message of received) await receiver.completeMessage(message);
    await receiver.close();
  });

  test("scheduleMessages holds a message until its time; cancelScheduledMessages removes one", async () => {
    const queue = entities.schedule;
    const sender = root.createSender(queue);
    const farFuture = new Date(Date.now() + 3_600_000);
    const [cancelled] = await sender.scheduleMessages({ body: "never", messageId: "cancelled" }, farFuture);
    const soon = new Date(Date.now() + 3_000);
    const [due] = await sender.scheduleMessages({ body: "soon", messageId: "due" }, soon);
    assert.notEqual(cancelled.toString(), due.toString());
    assert.equal((await queueCounts(queue)).scheduled, 2);

    const peeked = await root.createReceiver(queue).peekMessages(10);
    const scheduled = peeked.find((m) => m.messageId === "cancelled");
    assert.equal(scheduled?.state, "scheduled");
    assert.equal(scheduled.scheduledEnqueueTimeUtc?.getTime(), Math.trunc(farFuture.getTime()));

    await sender.cancelScheduledMessages(cancelled);
    await sender.close();
    assert.equal((await queueCounts(queue)).scheduled, 1);

    const receiver = root.createReceiver(queue);
    const [message] = await receiveAtLeast(receiver, 1, 20_000);
    assert.equal(message?.messageId, "due");
    assert.ok(message.enqueuedTimeUtc.getTime() >= soon.getTime() - 1_000, `enqueued at ${message.enqueuedTimeUtc.toISOString()}, scheduled for ${soon.toISOString()}`);
    assert.ok(Date.now() >= soon.getTime() - 1_000, "not delivered before its time");
    await receiver.completeMessage(message);
    await receiver.close();
    assert.equal((await queueCounts(queue)).total, 0);
  });
});

describe("topic rules", () => {
  test("createRule (SQL filter; correlation filter with an action), listRules, deleteRule; the subscription receives only matching messages", async () => {
    const { topic, subscription } = entities;
    const rules = root.createRuleManager(topic, subscription);
    for await (const rule of rules.listRules()) await rules.deleteRule(rule.name);
    await rules.createRule("red", { sqlExpression: "color = 'red'" });
    await rules.createRule("orders", { correlationId: "order-flow", applicationProperties: { kind: "order" } }, { sqlExpression: "SET routed = 'orders'" });

    const listed = [];
    for await (const rule of rules.listRules()) listed.push(rule);
    listed.sort((a, b) => a.name.localeCompare(b.name));
    assert.deepEqual(listed.map((r) => r.name), ["orders", "red"]);
    assert.equal(listed[1].filter.sqlExpression, "color = 'red'");
    assert.equal(listed[0].filter.correlationId, "order-flow");
    assert.deepEqual(listed[0].filter.applicationProperties, { kind: "order" });
    assert.equal(listed[0].action.sqlExpression, "SET routed = 'orders'");

    const sender = root.createSender(topic);
    await sender.sendMessages([
      { body: 1, messageId: "red", applicationProperties: { color: "red" } },
      { body: 2, messageId: "blue", applicationProperties: { color: "blue" } },
      { body: 3, messageId: "order", correlationId: "order-flow", applicationProperties: { kind: "order" } },
      { body: 4, messageId: "order-other-flow", correlationId: "other", applicationProperties: { kind: "order" } },
    ]);
    const receiver = root.createReceiver(topic, subscription);
    const received = await receiveAtLeast(receiver, 2);
    assert.deepEqual(received.map((m) => m.messageId).sort(), ["order", "red"]);
    const order = received.find((m) => m.messageId === "order");
    assert.equal(order.applicationProperties.routed, "orders", "the correlation rule's action ran");
    for (const message of received) await receiver.completeMessage(message);
    assert.deepEqual(await receiver.receiveMessages(5, { maxWaitTimeInMs: 1_000 }), [], "nothing else matched");

    await rules.deleteRule("red");
    const left = [];
    for await (const rule of rules.listRules()) left.push(rule.name);
    assert.deepEqual(left, ["orders"]);
    await sender.sendMessages([
      { body: 5, messageId: "red-after-delete", applicationProperties: { color: "red" } },
      { body: 6, messageId: "order-2", correlationId: "order-flow", applicationProperties: { kind: "order" } },
    ]);
    await sender.close();
    const after = await receiveAtLeast(receiver, 1);
    assert.deepEqual(after.map((m) => m.messageId), ["order-2"]);
    for (const message of after) await receiver.completeMessage(message);
    assert.deepEqual(await receiver.receiveMessages(5, { maxWaitTimeInMs: 1_000 }), [], "the deleted rule no longer selects");
    await receiver.close();
  });
});

/** A SharedAccessSignature as the SDKs sign one: HMAC-SHA256 of "URL-ENCODED-AUDIENCE\nEXPIRY", keyed with the key's text. */
function signToken(audience, keyName, key, expiresAtSeconds) {
  const encoded = encodeURIComponent(audience);
  const signature = createHmac("sha256", key).update(`${encoded}\n${expiresAtSeconds}`).digest("base64");
  return `SharedAccessSignature sr=${encoded}&sig=${encodeURIComponent(signature)}&se=${expiresAtSeconds}&skn=${keyName}`;
}

/** Endpoint, key name and key of a connection string. */
function partsOf(connectionString) {
  const parts = Object.fromEntries(connectionString.split(";").filter(Boolean).map((p) => {
    const equals = p.indexOf("=");
    return [p.slice(0, equals), p.slice(equals + 1)];
  }));
  return { endpoint: parts.Endpoint, keyName: parts.SharedAccessKeyName, key: parts.SharedAccessKey };
}

describe("security", () => {
  const queue = () => entities.secure;

  test("a Send-only policy sends but cannot receive; a Listen-only policy receives but cannot send (UnauthorizedAccess)", async () => {
    const sendOnly = clientFor(settings.sendOnly, failFastRetryOptions);
    const listenOnly = clientFor(settings.listenOnly, failFastRetryOptions);

    const sender = sendOnly.createSender(queue());
    await sender.sendMessages({ body: "allowed", messageId: "by-send-only" });
    await sender.close();
    assert.equal((await queueCounts(queue())).active, 1);

    const deniedReceiver = sendOnly.createReceiver(queue());
    assert.equal(await codeOf(deniedReceiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 })), "UnauthorizedAccess");
    await deniedReceiver.close();
    const deniedPeek = sendOnly.createReceiver(queue());
    assert.equal(await codeOf(deniedPeek.peekMessages(1)), "UnauthorizedAccess");
    await deniedPeek.close();

    const deniedSender = listenOnly.createSender(queue());
    assert.equal(await codeOf(deniedSender.sendMessages({ body: "refused", messageId: "by-listen-only" })), "UnauthorizedAccess");
    await deniedSender.close();
    assert.equal((await queueCounts(queue())).active, 1, "the refused send stored nothing");

    const receiver = listenOnly.createReceiver(queue());
    const [message] = await receiveAtLeast(receiver, 1);
    assert.equal(message?.messageId, "by-send-only");
    await receiver.completeMessage(message);
    await receiver.close();
    assert.equal((await queueCounts(queue())).total, 0);
  });

  test("a wrong key is refused (UnauthorizedAccess)", async () => {
    const { endpoint, keyName } = partsOf(settings.root);
    const wrong = `Endpoint=${endpoint};SharedAccessKeyName=${keyName};SharedAccessKey=${randomBytes(32).toString("base64")};UseDevelopmentEmulator=true`;
    const client = clientFor(wrong, failFastRetryOptions);
    const sender = client.createSender(queue());
    assert.equal(await codeOf(sender.sendMessages({ body: "refused", messageId: "wrong-key" })), "UnauthorizedAccess");
    const receiver = client.createReceiver(queue());
    assert.equal(await codeOf(receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 })), "UnauthorizedAccess");
    assert.equal((await queueCounts(queue())).total, 0);
  });

  test("a signature signed by the application is accepted until it expires; an expired one is refused (UnauthorizedAccess)", async () => {
    // ServiceBusClient(host, AzureSASCredential) always speaks TLS (core-amqp uses plain TCP only
    // for UseDevelopmentEmulator=true, which the host form cannot carry), so the self-signed token
    // goes in the connection string's SharedAccessSignature=, which feeds the same fixed-token
    // provider (createSasTokenProvider) the credential would.
    const { endpoint, keyName, key } = partsOf(settings.root);
    const audience = endpoint; // the namespace: covers every entity
    const now = Math.floor(Date.now() / 1000);
    const withToken = (token) => `Endpoint=${endpoint};SharedAccessSignature=${token};UseDevelopmentEmulator=true`;

    const valid = clientFor(withToken(signToken(audience, keyName, key, now + 600)), failFastRetryOptions);
    const sender = valid.createSender(queue());
    await sender.sendMessages({ body: "signed", messageId: "self-signed" });
    await sender.close();
    assert.equal((await queueCounts(queue())).active, 1, "a token the application signed itself is accepted");

    const expired = clientFor(withToken(signToken(audience, keyName, key, now - 60)), failFastRetryOptions);
    const expiredSender = expired.createSender(queue());
    assert.equal(await codeOf(expiredSender.sendMessages({ body: "late", messageId: "expired" })), "UnauthorizedAccess");
    const expiredReceiver = expired.createReceiver(queue());
    assert.equal(await codeOf(expiredReceiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 })), "UnauthorizedAccess");
    assert.equal((await queueCounts(queue())).active, 1, "the expired token changed nothing");
    await drain(queue());
  });
});

describe("bad input", () => {
  test("an unknown entity fails with MessagingEntityNotFound and is not created", async () => {
    const client = clientFor(settings.root, failFastRetryOptions);
    const sender = client.createSender("no-such-queue");
    assert.equal(await codeOf(sender.sendMessages({ body: "lost" })), "MessagingEntityNotFound");
    const receiver = client.createReceiver("no-such-queue");
    assert.equal(await codeOf(receiver.receiveMessages(1, { maxWaitTimeInMs: 2_000 })), "MessagingEntityNotFound");
    const shown = await farmExit("queue", "show", "no-such-queue");
    assert.notEqual(shown.code, 0, `farm queue show no-such-queue should fail: ${shown.stdout}`);
  });

  test("a 600 KB body (within the link's 1 MB, over Farm's 256 KB), alone or in a batch, fails with MessageSizeExceeded and stores nothing", async () => {
    const queue = entities.size;
    const client = clientFor(settings.root, failFastRetryOptions);
    const sender = client.createSender(queue);
    assert.equal(await codeOf(sender.sendMessages({ body: Buffer.alloc(600 * 1024, 2), messageId: "600-kb" })), "MessageSizeExceeded");
    const batch = await sender.createMessageBatch();
    assert.ok(batch.tryAddMessage({ body: Buffer.alloc(600 * 1024, 3), messageId: "600-kb-in-batch" }), "600 KB fits the link's 1 MB");
    assert.equal(await codeOf(sender.sendMessages(batch)), "MessageSizeExceeded");
    // The sender still works after the refusals.
    await sender.sendMessages({ body: "small", messageId: "small" });
    assert.deepEqual(await queueCounts(queue).then((c) => [c.active, c.total]), [1, 1], "only the small message was stored");
    await drain(queue);
  });

  // The SDK does not check a single message against the link's max-message-size, so the transfer
  // goes out: the node must refuse that transfer alone (not detach the link, which the SDK would
  // wait out as a timeout).
  test("a 2 MB body (over the link's 1 MB max-message-size) fails with MessageSizeExceeded and stores nothing", async () => {
    const queue = entities.size;
    const client = clientFor(settings.root, () => ({ maxRetries: 0, timeoutInMs: 3_000 }));
    const sender = client.createSender(queue);
    try {
      assert.equal(await codeOf(sender.sendMessages({ body: Buffer.alloc(2 * 1024 * 1024, 1), messageId: "two-mb" })), "MessageSizeExceeded");
    } finally {
      assert.equal((await queueCounts(queue)).total, 0, "nothing was stored");
    }
  });

  test("settling after the lock expired fails with MessageLockLost and leaves the message in the queue", async () => {
    const queue = entities.lock; // lock duration 5 s
    const sender = root.createSender(queue);
    await sender.sendMessages({ body: "slow", messageId: "lock-lost" });
    await sender.close();
    const receiver = root.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
    const [message] = await receiveAtLeast(receiver, 1);
    await clockPasses(message.lockedUntilUtc, 500);
    assert.equal(await codeOf(receiver.completeMessage(message)), "MessageLockLost");
    assert.deepEqual(await queueCounts(queue).then((c) => [c.active, c.dead_letter, c.total]), [1, 0, 1], "nothing settled");

    const [again] = await receiveAtLeast(receiver, 1);
    assert.equal(again?.messageId, "lock-lost");
    assert.equal(again.deliveryCount, 1, "the expired lock counted as a delivery");
    await receiver.completeMessage(again);
    await receiver.close();
    assert.equal((await queueCounts(queue)).total, 0);
  });
});
